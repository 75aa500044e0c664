#pragma once

// The advice `dtrain plan` ends with, following the guide's rules: a model that fits runs plain DDP with mixed
// precision and a large batch; a large one shards (ZeRO / FSDP); a very large one adds tensor parallelism within a
// node and pipeline stages across nodes; several nodes want NCCL over InfiniBand with bucketed, overlapped
// gradients. Each reason carries the numbers it rests on.

#include <optional>
#include <string>
#include <vector>

#include "cli/plan/advisor.h"
#include "cli/plan/launch_lines.h"

namespace dtrain::plan {

struct Recommendation {
  std::optional<Evaluation> choice;    // nullopt: no layout fits
  std::vector<std::string> reasons;    // why this one, in the order they apply
  // dtrain-trainer's flags for it (with --tp/--pp/--pp-schedule 1f1b and --device cpu for a tensor- or
  // pipeline-parallel layout); empty when dtrain-trainer does not run it (advisor.h, trainer_refusal).
  std::vector<std::string> trainer_args;
  // Why there are none, or what to know of them (tensor and pipeline parallelism on CPUs only so far).
  std::vector<std::string> trainer_notes;
  std::vector<std::string> spec_lines;    // job-spec lines (YAML) that run it: workers_per_node x nodes ranks
  std::optional<LaunchLines> launch;      // Megatron-LM, torchtitan and DeepSpeed lines for it (launch_lines.h)
};

// strategies: data_parallel_strategies(request); search: model_parallel_search(request), consulted only when no
// strategy fits.
Recommendation recommend(const PlanRequest& request, const std::vector<Evaluation>& strategies,
                         const std::vector<Evaluation>& search);

// Everything `dtrain plan` prints, as text or JSON (render.h).
struct PlanReport {
  PlanRequest request;
  std::vector<Evaluation> strategies;  // DDP and ZeRO-1..3 at --tp/--pp
  std::vector<Evaluation> search;      // the model-parallel layouts (empty with --tp/--pp or without a shape)
  Recommendation recommendation;
};
PlanReport make_report(const PlanRequest& request);

}  // namespace dtrain::plan

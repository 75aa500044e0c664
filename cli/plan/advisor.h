#pragma once

// The strategy advisor: each candidate layout (ZeRO stage x tensor-parallel x pipeline-parallel) evaluated with
// formulas.h for one request, and the choice among those that fit, with its reasons and the flags that run it.
//
// Rank order, as Megatron-LM lays ranks out: tensor-parallel ranks adjacent (within a node), then data-parallel,
// then pipeline stages outermost. So the data-parallel group leaves the node when tp * dp > GPUs per node, and
// pipeline stages talk across nodes whenever there is more than one node.

#include <optional>
#include <string>
#include <vector>

#include "cli/plan/formulas.h"
#include "cli/plan/request.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::plan {

struct Layout {
  int stage = 0;  // ZeRO stage: 0 = DDP, 3 = ZeRO-3 / FSDP FULL_SHARD
  int tp = 1;
  int pp = 1;
};
// "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP", with " + TP 2 + PP 4" when model-parallel.
std::string layout_name(const Layout& layout);

// Bytes one GPU sends per optimizer step, and the time they take at the given bandwidths.
struct Comm {
  double data_parallel = 0;
  double tensor_parallel = 0;
  double pipeline = 0;
  bool data_parallel_crosses_nodes = false;
  bool pipeline_crosses_nodes = false;
  std::optional<double> seconds;  // nullopt when a bandwidth it needs was not given
  std::optional<double> data_parallel_seconds;  // the data-parallel part of seconds
  double bytes() const { return data_parallel + tensor_parallel + pipeline; }
};

// With --gpu-tflops: the step's compute (6 FLOPs per parameter per token, spread over every GPU, stretched by the
// pipeline bubble) against its communication.
struct Scaling {
  double ideal_s = 0;       // compute per GPU with perfect scaling
  double compute_s = 0;     // ideal_s / (1 - bubble)
  double exposed_s = 0;     // communication the step waits for when it overlaps as the frameworks do (below)
  double efficiency_serial = 0;   // ideal / (compute + communication): nothing overlapped
  // ideal / (compute + exposed): data-parallel communication overlapped as formulas.h's
  // exposed_data_parallel_seconds says (DDP buckets behind backward, the last bucket and ZeRO's parameter
  // all-gather exposed); tensor- and pipeline-parallel transfers exposed in full, as they sit between the
  // computations that need them (Megatron's per-layer allreduces, the stage-to-stage sends).
  double efficiency_overlap = 0;
};

struct Evaluation {
  Layout layout;
  int dp = 1;                                  // data-parallel ranks: GPUs / (tp * pp)
  ModelStates states;                          // the ZeRO paper's accounting
  std::optional<trainer::ZeroMemory> trainer;  // what dtrain-trainer reports (request.trainer_accounting, tp = pp = 1)
  std::optional<double> activations;           // when the shape is known
  double total = 0;                            // states + activations
  bool fits = false;                           // total within the GPU's memory less the headroom
  Accumulation accumulation;
  double bubble = 0;
  Comm comm;
  std::optional<Scaling> scaling;
};

Evaluation evaluate(const PlanRequest& request, const Layout& layout);

// DDP, ZeRO-1, ZeRO-2 and ZeRO-3 at the request's --tp and --pp (1 when not given). With pp > 1 only stages 0 and
// 1: stages 2 and 3 reduce-scatter or gather every micro-batch, which pipelining multiplies (DeepSpeed refuses them
// with its pipeline engine).
std::vector<Evaluation> data_parallel_strategies(const PlanRequest& request);

// With the shape known and neither --tp nor --pp given: every layout with tp a divisor of both the GPUs per node and
// the heads, pp a divisor of the layers, tp * pp > 1 dividing the GPUs, at each allowed stage.
std::vector<Evaluation> model_parallel_search(const PlanRequest& request);

// The order that --bottleneck sets: among layouts that fit, speed prefers the least model parallelism, then the
// least communication (time when the bandwidths are known, else bytes), then the lower stage; memory prefers the
// least model parallelism, then the most memory left; communication prefers the least communication first.
// Returns the best of `candidates` that fits, or nullopt.
std::optional<Evaluation> best_fit(const std::vector<Evaluation>& candidates, Bottleneck bottleneck);

}  // namespace dtrain::plan

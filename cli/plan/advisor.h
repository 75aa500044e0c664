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

#include "cli/plan/costs/formulas.h"
#include "cli/plan/request.h"
#include "cli/plan/trainer_model.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::plan {

struct Layout {
  int stage = 0;  // ZeRO stage: 0 = DDP, 3 = ZeRO-3 / FSDP FULL_SHARD
  int tp = 1;
  int pp = 1;
  Recompute recompute = Recompute::none;
  // Megatron-LM's sequence parallelism beside tensor parallelism: the searched layouts use it whenever tp > 1 (the
  // same bytes on the wire, the activations between the tensor-parallel regions split over t; Korthikanti Sec. 4.2.2).
  bool sequence_parallel = false;
  // Megatron's interleaved 1F1B: each GPU holds v chunks of L/(p*v) layers (v > 1 only with p > 1, v*p dividing
  // the layers and p dividing the micro-batches, as Megatron requires).
  int virtual_stages = 1;
  // b, sequences per GPU per micro-step: --micro-batch when given, else searched over 1, 2, 4 and 8; 0 (in a layout
  // given to evaluate) stands for the request's, and evaluate's result holds the value.
  int micro_batch = 0;
};
// "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP", with " + TP 2 + PP 4" when model-parallel and " + full recompute" or
// " + selective recompute" when it recomputes.
std::string layout_name(const Layout& layout);

// Bytes one GPU sends per optimizer step, and the time they take at the given bandwidths.
struct Comm {
  double data_parallel = 0;
  double tensor_parallel = 0;
  double pipeline = 0;
  bool data_parallel_crosses_nodes = false;
  bool pipeline_crosses_nodes = false;
  // The collectives' latencies (formulas.h, collective_latency_seconds): the data-parallel ones (by the bucket
  // count of data_parallel_collectives) and the tensor-parallel ones (per layer per micro-batch); in seconds.
  double latency_s = 0;
  std::optional<double> seconds;  // bytes at the bandwidths plus latency_s; nullopt when a bandwidth was not given
  // The parts of seconds, each with its latency (nullopt when its bandwidth was not given): the data-parallel
  // collectives, the tensor-parallel allreduces, and the pipeline's stage-to-stage sends with the tied embedding's
  // gradient sum.
  std::optional<double> data_parallel_seconds;
  std::optional<double> tensor_parallel_seconds;
  std::optional<double> pipeline_seconds;
  double bytes() const { return data_parallel + tensor_parallel + pipeline; }
};

// With the GPU's rate (--gpu, or --gpu-tflops) and the bandwidths: the step's compute (model FLOPs, formulas.h's
// model_flops_per_token, spread over every GPU, times recomputation's factor, stretched by the pipeline bubble)
// against its communication.
struct Scaling {
  double ideal_s = 0;       // model FLOPs per GPU at its rate: perfect scaling, no recomputation
  double compute_s = 0;     // ideal_s * recomputation's factor * the stages' imbalance / (1 - bubble)
  double bubble_s = 0;      // of compute_s, the pipeline's bubble: bubble / (1 - bubble) of the stage's busy time
  double exposed_s = 0;     // communication the step waits for when it overlaps as the frameworks do (below)
  // The parts of exposed_s: the data-parallel communication left after the overlap, and the tensor- and
  // pipeline-parallel transfers (Comm's), in full.
  double data_parallel_exposed_s = 0;
  double tensor_parallel_s = 0;
  double pipeline_s = 0;
  double optimizer_s = 0;   // the optimizer step at the GPU's memory bandwidth (formulas.h); 0 when not known
  double efficiency_serial = 0;   // ideal / (compute + communication): nothing overlapped
  // ideal / (compute + exposed + optimizer): data-parallel communication overlapped as formulas.h's
  // exposed_data_parallel_seconds says (DDP buckets behind backward, the last bucket and ZeRO's parameter
  // all-gather exposed); tensor- and pipeline-parallel transfers exposed in full, as they sit between the
  // computations that need them (Megatron's per-layer allreduces, the stage-to-stage sends).
  double efficiency_overlap = 0;
  // The predicted step: compute (model FLOPs times recomputation's factor, at the GPU's rate, stretched by the
  // bubble) plus the exposed communication plus the optimizer step; what it gives in tokens, hardware FLOP/s per
  // GPU (recomputation counted, as Megatron-LM reports them) and, with the GPU's peak known (--gpu), model FLOPs
  // utilisation (PaLM's MFU: recomputation not counted).
  double step_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  std::optional<double> mfu;
};

struct Evaluation {
  Layout layout;
  int dp = 1;                                  // data-parallel ranks: GPUs / (tp * pp)
  ModelStates states;                          // the ZeRO paper's accounting
  // What dtrain-trainer reports (request.trainer_accounting): its model states, and its mem_activations_bytes at this
  // layout's micro-batch and recomputation (with the shape known). With tensor or pipeline parallelism, those of
  // the stage with the largest total, and every stage's in trainer_stages (trainer_model.h, trainer_stage_memory:
  // 1F1B over the layout's micro-batches); trainer_refusal says why there are none for a layout it does not run.
  std::optional<trainer::ZeroMemory> trainer;
  std::optional<double> trainer_activations;
  std::vector<TrainerStageMemory> trainer_stages;
  std::string trainer_refusal;
  std::optional<double> activations;           // when the shape is known
  double total = 0;                            // states + activations
  bool fits = false;                           // total within the GPU's memory less the headroom
  Accumulation accumulation;
  double bubble = 0;
  Comm comm;
  std::optional<Scaling> scaling;
};

Evaluation evaluate(const PlanRequest& request, const Layout& layout);

// Why dtrain-trainer does not run a layout with tensor or pipeline parallelism (its model is not dtrain-trainer's
// GPT-2, or the layout needs what it lacks: the interleaved schedule, ZeRO-2/3 beside PP, an uneven split, tokens
// that sequence parallelism cannot split: trainer_layout_refusal), or "" when it does; "" for every layout without
// them.
std::string trainer_refusal(const PlanRequest& request, const Layout& layout);
// dtrain-trainer's flags for the layout (1F1B over its micro-steps) as trainer_model.h takes them.
TrainerLayout trainer_layout(const PlanRequest& request, const Evaluation& evaluation);

// Whether the request's framework runs the layout and it keeps to what --zero, --recompute and
// --sequence-parallel fix (request.h, Framework).
bool runs_on(const PlanRequest& request, const Layout& layout);

// DDP, ZeRO-1, ZeRO-2 and ZeRO-3 (those runs_on allows) at the request's --tp and --pp (1 when not given). With
// pp > 1 only stages 0 and 1: stages 2 and 3 reduce-scatter or gather every micro-batch, which pipelining multiplies
// (DeepSpeed refuses them with its pipeline engine).
std::vector<Evaluation> data_parallel_strategies(const PlanRequest& request);

// With the shape known and neither --tp nor --pp given: every layout with tp a divisor of both the GPUs per node and
// the heads, pp splitting the layers (formulas.h, splits_layers; each with 1, 2 or 4 interleaved stages where they
// apply), tp * pp dividing the GPUs, at each allowed stage and each recomputation (none, selective, full;
// tp * pp = 1 only with recomputation: without it, it is data_parallel_strategies'), with sequence parallelism when
// tp > 1.
std::vector<Evaluation> model_parallel_search(const PlanRequest& request);

// The order that --bottleneck sets: among layouts that fit, speed prefers the shortest predicted step when every
// candidate has one (the GPU's rate and the bandwidths known: --gpu, or --gpu-tflops and the bandwidths), else the
// least model parallelism, then the least communication (time when the bandwidths are known, else bytes), then the
// lower stage; memory prefers the least model parallelism, then the most memory left; communication prefers the
// least communication first. Ties go to less recomputation. With times, every layout within kSpeedTolerance of the
// fastest ties with it, and the simplest of those (least model parallelism, lowest stage, least recomputation) wins.
// Returns the best of `candidates` that fits, or nullopt.
std::optional<Evaluation> best_fit(const std::vector<Evaluation>& candidates, Bottleneck bottleneck);
// Layouts predicted within 3% of the fastest count as fast as it, and --bottleneck speed takes the simplest of them.
inline constexpr double kSpeedTolerance = 0.03;
// Whether every candidate that fits has a predicted step (Evaluation::scaling), so speed can choose by it.
bool is_timed(const std::vector<Evaluation>& candidates);

}  // namespace dtrain::plan

#pragma once

// --metrics FILE: one JSON object per optimizer step, one per line, flushed as it is written (a `tail -f` or a
// crashed run still has every finished step):
//   {"step": 1, "loss": 5.541, "lr": 0.0006, "grad_norm": 1.93, "tokens_per_s": 10412.3, "step_ms": 196.7}
// step is 1-based (the number of optimizer steps done); loss is the mean over the global batch (all ranks, all
// micro-steps); grad_norm is before clipping; tokens_per_s counts the global batch's tokens over step_ms, the wall time
// from zero_grad to the end of the optimizer update (a checkpoint written after the step is not included). With more
// than one rank, "comm_ms" is the time the step's collectives ran (each one's duration on the communicator's thread,
// summed: gradient reductions, parameter all-gathers, the loss and the other scalar collectives, hidden or not),
// "comm_exposed_ms" the part of the step's wall time the training thread spent on communication rather than computing
// (waiting for collectives, and the loop's reduce phases; the health report's comm_exposed_ms, metrics/step_times.h)
// and "comm_hidden" = 1 - comm_exposed_ms / comm_ms, clamped to [0, 1]: the fraction of the communication that compute
// hid (1 with no communication). With --pp above 1, "pp_bubble_ms" is the time rank 0's pipeline stage (the first)
// waited for its neighbour's gradients (the pipeline's bubble plus the transfers; metrics/step_times.h's bubble_ms), in
// none of the other times; it can be 0 on a stage that never waited. With --zero 1..3 each line also has what this rank
// holds (integers, bytes; README "--zero" gives the formulas): "mem_params_bytes", "mem_grads_bytes", "mem_optim_bytes"
// (steady state, padding included), "mem_activations_bytes" and, stage 3 only, "mem_gathered_peak_bytes" (the most
// bytes of all-gathered units alive at once during the step). With DDP over more than one rank or any --zero stage,
// "comm_bytes" is what this rank sent during the step (DDP's allreduces, or ZeRO's reduce-scatters and all-gathers;
// ring accounting). With --precision fp16, "loss_scale" is the scale the step's backward used and "skipped" (true or
// false) whether the loss scaler skipped the optimizer update (an inf or NaN gradient). Values are printed with 9
// significant digits, enough to round-trip a float. A run appends to an existing file.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace dtrain::trainer {

// --zero 1..3 (jsonl.h's top comment).
struct ShardingMetrics {
  std::uint64_t mem_params_bytes = 0;
  std::uint64_t mem_grads_bytes = 0;
  std::uint64_t mem_optim_bytes = 0;
  std::uint64_t mem_activations_bytes = 0;
  std::optional<std::uint64_t> mem_gathered_peak_bytes;  // stage 3 only
};

struct StepMetrics {
  std::uint64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double step_ms = 0;
  // Only with more than one rank (top of this file): comm_hidden = 1 - comm_exposed_ms / comm_ms, clamped.
  std::optional<double> comm_hidden;
  std::optional<double> comm_ms;
  std::optional<double> comm_exposed_ms;
  std::optional<double> pp_bubble_ms;       // only with --pp above 1
  std::optional<ShardingMetrics> sharding;  // only with --zero 1..3
  std::optional<std::uint64_t> comm_bytes;  // with DDP over more than one rank, or --zero 1..3
  std::optional<double> loss_scale;         // only with --precision fp16
  std::optional<bool> skipped;              // only with --precision fp16
};

// "{...}" without a newline; NaN and infinities become null (JSON has no such numbers).
std::string to_json(const StepMetrics& metrics);

// A resumed run repeats the steps after its checkpoint: this drops the lines of steps > last_step from the file
// (rewritten atomically), so the file holds each step once. A missing file is left missing.
void drop_metrics_after(const std::string& path, std::uint64_t last_step);

class MetricsWriter {
 public:
  // Opens path for appending; throws std::runtime_error naming the path if it cannot.
  explicit MetricsWriter(const std::string& path);
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();

  void write(const StepMetrics& metrics);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace dtrain::trainer

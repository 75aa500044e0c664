#pragma once

// What the loop tells the world after each optimizer step: the --metrics line (rank 0), the console line (rank 0,
// every --log-every steps and the last) and the health report to the agent (every rank). A loss that is not finite
// ends the run here, with an error that says so.

#include <cstdint>

#include "trainer/health/reporter.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/metrics/jsonl.h"
#include "trainer/metrics/step_times.h"
#include "trainer/model/config.h"

namespace dtrain::trainer {

class DdpReducer;
class ZeroEngine;

// The step's communication and memory: with more than one rank comm_ms (what comm_time() counted since
// `at_start`, the step's start), comm_exposed_ms (times.comm_exposed_ms) and comm_hidden from them; comm_bytes and
// the sharding from DDP (null without it) or the ZeRO engine (null without it), whose step statistics this takes
// (ZeroEngine::take_stats).
void measure_comm_and_memory(StepMetrics& m, const StepTimes& times, const CommTime& at_start, const DdpReducer* ddp,
                             ZeroEngine* zero, std::uint64_t activation_bytes, int world);

// Where reports go, and what the console line needs.
struct StepReportTargets {
  MetricsWriter* metrics = nullptr;   // rank 0 with --metrics, else null
  HealthReporter* health = nullptr;   // started by dtrain (DTRAIN_AGENT_ADDR), else null
  int rank = 0;
  int world = 1;
  long log_every = 1;                 // --log-every
  long steps = 0;                     // --steps
  // The model, in every health report, for the launcher's model FLOP/s and MFU (cli/mfu/model_flops.h).
  std::uint64_t model_params = 0;     // Gpt::num_params(), as the first log line says
  double model_flops_per_token = 0;   // model_flops_per_token() below
  // What the rank computes on, as torch.cuda.get_device_name names a GPU ("NVIDIA H200"), or "cpu": the launcher
  // takes the peak FLOP/s for MFU from it (cli/mfu/device_peaks.h).
  std::string device_name = "cpu";
  // This rank's place in the --tp x --pp grid (trainer/parallel/grid/rank_grid.h: the RankGrid's tp() and pp(), its
  // GridCoords' tp and pp), in every health report: the launcher names a rank by it. With pp above 1 the metrics line
  // also has the step's pp_bubble_ms. The defaults are a rank of a model that is not split.
  int tp = 1;
  int pp = 1;
  int tp_rank = 0;
  int pp_stage = 0;
};

// The model FLOPs of one token, forward and backward, as PaLM counts them (Chowdhery et al., arXiv:2204.02311,
// Appendix B): 6N + 12*L*C*T. 6 FLOPs per parameter per token for the matmuls with the weights (N all of them: wte
// is also the tied output layer's matrix; the position embedding wpe, C*maxT of N, is a lookup and is counted all
// the same, as in the log's parameter count), and 12*L*C*T for attention's QK^T and scores x V over the T positions
// of a sequence (forward 4*L*C*T, backward twice that), which 6N leaves out.
double model_flops_per_token(const GptConfig& config, int seq_len, std::uint64_t params);

// The health report of a step on `to.rank` of `to.world`: tokens/s is this rank's share of the job's, the memory and
// traffic are the metrics line's (0 where it has none), the times (the pipeline's bubble among them) are `times`, the
// resident set is read now, the model, the device and the grid place are `to`'s. No points: the reporter keeps the
// step's point ({step, loss, step_ms, tokens_per_s}) with those of the other steps since its last send
// (trainer/health/reporter.h).
HealthReport health_report(const StepMetrics& m, const StepTimes& times, const StepReportTargets& to);

// Writes the step's metrics line (with pp_bubble_ms, times.bubble_ms, when `to.pp` is above 1: a stage's bubble can be
// 0, so the pipeline is told by its size), console line and health report; throws std::runtime_error when the loss is
// not finite (the agent would refuse it in a report: the run has diverged).
void report_step(const StepMetrics& m, const StepTimes& times, const StepReportTargets& to);

}  // namespace dtrain::trainer

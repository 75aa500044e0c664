#pragma once

// What the loop tells the world after each optimizer step: the --metrics line (rank 0), the console line (rank 0,
// every --log-every steps and the last) and the health report to the agent (every rank). A loss that is not finite
// ends the run here, with an error that says so.

#include <cstdint>

#include "trainer/health/reporter.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/metrics/jsonl.h"
#include "trainer/metrics/step_times.h"

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
};

// The health report of a step on `rank` of `world`: tokens/s is this rank's share of the job's, the memory and
// traffic are the metrics line's (0 where it has none), and the resident set is read now.
HealthReport health_report(const StepMetrics& m, const StepTimes& times, int rank, int world);

// Writes the step's metrics line, console line and health report; throws std::runtime_error when the loss is not
// finite (the agent would refuse it in a report: the run has diverged).
void report_step(const StepMetrics& m, const StepTimes& times, const StepReportTargets& to);

}  // namespace dtrain::trainer

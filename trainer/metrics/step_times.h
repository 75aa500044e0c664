#pragma once

// Where one optimizer step's time went, measured on the training thread in disjoint pieces: the loop times each
// phase into one of StepTimes' parts (timed below), and the time the thread spent waiting for collectives inside
// a phase (comm_time.h) goes to comm_exposed_ms instead of that part: a ZeRO-3 all-gather awaited in forward, or
// ZeRO-1/2's parameter all-gather after the optimizer update, is exposed communication, not compute or optimizer.

#include <chrono>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"

namespace dtrain::trainer {

// HealthReport (trainer/health/reporter.h) says what each holds; they add up to at most the step's wall time.
struct StepTimes {
  double data_wait_ms = 0;
  double compute_ms = 0;
  double comm_exposed_ms = 0;
  double optimizer_ms = 0;
  // Pipeline parallelism (--pp above 1): the time this stage waited for a neighbour's activations or gradients
  // ("pp-recv": the pipeline's bubble, (P-1)/m of the step at best, plus the transfers), not in comm_exposed_ms.
  double bubble_ms = 0;
};

// Enters `phase` (health/phase.h), does `body` and adds its wall time in ms to times.*part, less the time this
// thread waited for collectives meanwhile, which goes to times.comm_exposed_ms; returns what `body` returns.
template <class Body>
auto timed(const char* phase, StepTimes& times, double StepTimes::*part, Body&& body) {
  using Clock = std::chrono::steady_clock;
  set_phase(phase);
  struct Split {
    StepTimes& times;
    double StepTimes::*part;
    Clock::time_point began = Clock::now();
    double waited_before = comm_time().waited_ms;
    ~Split() {
      const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
      const double waited = comm_time().waited_ms - waited_before;
      times.*part += elapsed - waited;
      times.comm_exposed_ms += waited;
    }
  } split{times, part};
  return body();
}

}  // namespace dtrain::trainer

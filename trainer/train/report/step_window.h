#pragma once

// The steps whose results the host has not read yet. A step on a device queues its work and goes on: its loss and
// gradient norm stay in the backend's memory, in this window's slots; its collectives are ordered before the
// compute stream on the device rather than waited for (DeferredCollectives, metrics/comm_time.h); and the host reads
// the window back, with one wait, every --log-every steps, or sooner: at the last step, before a checkpoint, and
// once 10 s have passed since the last read (so that the launcher's hang check and the metrics file hear of progress
// however large --log-every is). Then each step is reported as if it had just ended. On a host backend (the CPU)
// the window is one step, read at once (there is nothing to wait for). A loss that is not finite ends the run when
// its window is read (report_step): on a device up to --log-every steps after the step that diverged.
//
// What a device step cannot time on the host: its phases run on the device, behind the host. A window's steps are
// reported with the window's wall time, from the read before to this one, divided evenly (step_ms, tokens/s), the
// host's time for the data, the exposed communication and the pipeline's bubble as measured, and the rest of the
// step as compute; their communication time (comm_ms) is the window's collectives' own durations, divided evenly.

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/metrics/jsonl.h"
#include "trainer/metrics/step_times.h"

namespace dtrain::trainer {

struct WindowStep {
  StepMetrics metrics;
  StepTimes times;
};

class StepWindow {
 public:
  // Steps of K micro-steps on `backend` over `comm`; the window holds --log-every steps on a device backend (one
  // on a host backend).
  StepWindow(kernels::Backend& backend, Communicator& comm, int micro_steps, long log_every);

  bool deferred() const { return deferred_ != nullptr; }
  // The slots of the step being built (backend memory): its micro-steps' losses (K floats), its loss (the sum over
  // ranks of each rank's mean), its gradient norm, and a double of scratch.
  float* micro_losses() const { return slots_.data(); }
  float* loss() const { return slots_.data() + micro_steps_ + 2 * pending_.size(); }
  float* norm() const { return loss() + 1; }
  double* scratch() const { return slots_.as_double(scratch_at_); }

  // The step built in the slots above ends: `metrics` and `times` as measured (loss and grad_norm come from the
  // slots when it is read).
  void close_step(const StepMetrics& metrics, const StepTimes& times);
  // Whether to read now: the window is full, it holds the run's `last_step`, `saving` (a checkpoint follows), or
  // 10 s have passed since the last read.
  bool due(std::uint64_t step, std::uint64_t last_step, bool saving) const;
  // Waits for the window's collectives and reads its slots: the steps since the last read, oldest first, with
  // their loss (divided by the world size) and norm, and on a device the window's timing (top of this file).
  std::vector<WindowStep> read();

 private:
  using Clock = std::chrono::steady_clock;

  kernels::Backend& backend_;
  const int world_;
  const int micro_steps_;
  const std::size_t capacity_;
  std::unique_ptr<DeferredCollectives> deferred_;  // device backends only
  std::size_t scratch_at_ = 0;
  kernels::BackendArray slots_;
  std::vector<WindowStep> pending_;
  Clock::time_point last_read_ = Clock::now();
  double comm_at_read_ = comm_time().comm_ms;
};

}  // namespace dtrain::trainer

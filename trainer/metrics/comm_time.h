#pragma once

// The training thread's time in communication, for the step breakdown (step_times.h) and the --metrics line's
// comm_ms, comm_exposed_ms and comm_hidden. Every wait of the training thread on a collective (DDP's buckets,
// ZeRO's reduce-scatters and all-gathers, the loss and the loop's other scalar collectives) goes through
// wait_collective(), which adds to the calling thread's totals
//   waited_ms: how long the thread was blocked in Work::wait(), communication that nothing hid (exposed);
//   comm_ms:   how long the collective ran on the backend's thread (Work::elapsed_ms), hidden or not.
// The totals are per thread (thread_local): they are those of the thread that waits, the training thread in
// dtrain-trainer, and each rank of a test that runs its ranks as threads of one process counts its own. Callers
// take differences (per step, per phase).

#include <cstddef>
#include <memory>
#include <vector>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

struct CommTime {
  double waited_ms = 0;  // blocked in wait(): exposed communication
  double comm_ms = 0;    // the collectives' own durations on the backend's thread
};

// The calling thread's totals so far.
CommTime comm_time();

// Waits for `work` (rethrowing its CommError) in `phase` (health/phase.h: set for the wait, the previous phase back
// after; null keeps the current one) and adds the wait and the collective's duration to this thread's totals. This
// form always waits: for a result the host reads (a scalar collective, a flag).
void wait_collective(Work& work, const char* phase = nullptr);

// The same, except while a DeferredCollectives lives on this thread: then the compute stream is made to wait for
// `work` on the device (Work::order_before) and the host goes on; the DeferredCollectives waits for it later. For
// collectives whose results only the device reads (gradient buckets, parameter all-gathers).
void wait_collective(const std::shared_ptr<Work>& work, const char* phase = nullptr);

// A training step on a device (trainer/train/report/step_window.h): the collectives that wait_collective(shared_ptr)
// is given are ordered before `stream`'s later work instead of waited for, and kept until wait_all(), which waits for
// each in issue order on the host (their failures and timeouts, as a CommError) and adds their durations to the
// thread's comm_ms. Kept collectives that the device has finished are dropped once more than 512 are kept (their
// durations not counted). One per thread at a time; the destructor waits for nothing.
class DeferredCollectives {
 public:
  explicit DeferredCollectives(void* stream);
  ~DeferredCollectives();
  DeferredCollectives(const DeferredCollectives&) = delete;
  DeferredCollectives& operator=(const DeferredCollectives&) = delete;

  void defer(const std::shared_ptr<Work>& work, const char* phase);
  void wait_all();
  std::size_t kept() const { return kept_.size(); }

 private:
  struct Kept {
    std::shared_ptr<Work> work;
    const char* phase;
  };
  void* stream_;
  std::vector<Kept> kept_;
};

}  // namespace dtrain::trainer

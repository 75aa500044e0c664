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

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

struct CommTime {
  double waited_ms = 0;  // blocked in wait(): exposed communication
  double comm_ms = 0;    // the collectives' own durations on the backend's thread
};

// The calling thread's totals so far.
CommTime comm_time();

// Waits for `work` (rethrowing its CommError) in `phase` (health/phase.h: set for the wait, the previous phase back
// after; null keeps the current one) and adds the wait and the collective's duration to this thread's totals.
void wait_collective(Work& work, const char* phase = nullptr);

}  // namespace dtrain::trainer

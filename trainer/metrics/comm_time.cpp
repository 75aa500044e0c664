#include "trainer/metrics/comm_time.h"

#include <chrono>

#include "trainer/health/phase.h"

namespace dtrain::trainer {
namespace {

thread_local CommTime totals;

}  // namespace

CommTime comm_time() { return totals; }

void wait_collective(Work& work, const char* phase) {
  using Clock = std::chrono::steady_clock;
  const ScopedPhase waiting(phase);
  // A failed wait still blocked the thread: its time counts before the error goes on.
  struct AddWait {
    Clock::time_point began = Clock::now();
    ~AddWait() { totals.waited_ms += std::chrono::duration<double, std::milli>(Clock::now() - began).count(); }
  };
  {
    const AddWait add;
    work.wait();
  }
  totals.comm_ms += work.elapsed_ms();
}

}  // namespace dtrain::trainer

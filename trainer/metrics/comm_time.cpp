#include "trainer/metrics/comm_time.h"

#include <chrono>
#include <exception>
#include <stdexcept>

#include "trainer/health/phase.h"

namespace dtrain::trainer {
namespace {

thread_local CommTime totals;
thread_local DeferredCollectives* deferring = nullptr;

// Collectives the device has finished are dropped past this many kept ones.
constexpr std::size_t kPruneAbove = 512;

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

void wait_collective(const std::shared_ptr<Work>& work, const char* phase) {
  if (deferring != nullptr) {
    deferring->defer(work, phase);
  } else {
    wait_collective(*work, phase);
  }
}

DeferredCollectives::DeferredCollectives(void* stream) : stream_(stream) {
  if (deferring != nullptr) throw std::logic_error("DeferredCollectives: one per thread at a time");
  deferring = this;
}

DeferredCollectives::~DeferredCollectives() { deferring = nullptr; }

void DeferredCollectives::defer(const std::shared_ptr<Work>& work, const char* phase) {
  work->order_before(stream_);
  kept_.push_back({work, phase});
  if (kept_.size() > kPruneAbove) {
    std::erase_if(kept_, [](const Kept& k) { return k.work->done(); });
  }
}

void DeferredCollectives::wait_all() {
  // A failure is thrown after the rest have been waited for: none is left running on a buffer its owner frees.
  std::exception_ptr failure;
  for (const Kept& k : kept_) {
    try {
      wait_collective(*k.work, k.phase);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  kept_.clear();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace dtrain::trainer

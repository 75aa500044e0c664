#include "common/os/loop_lag.h"

#include <pthread.h>

#include "common/os/stop_thread.h"

namespace dtrain {

LoopLag::LoopLag(std::chrono::milliseconds period, std::chrono::milliseconds slack)
    : period_(period), slack_(slack), ticker_([this] { run(); }) {}

LoopLag::~LoopLag() { stop_and_join(mutex_, done_, wake_, ticker_); }

LoopLag::Clock::duration LoopLag::stalled_at(Clock::time_point now) const {
  const auto late = now - last_turn_ - period_;
  return late > slack_ ? stalled_ + late : stalled_;
}

LoopLag::Clock::duration LoopLag::stalled() const {
  std::lock_guard lock(mutex_);
  return stalled_at(Clock::now());
}

LoopLag::Clock::time_point LoopLag::live_now() const {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  return now - stalled_at(now);
}

void LoopLag::run() {
  // Named, so that its cost can be read per thread (scripts/bench/idle_cost.py).
  pthread_setname_np(pthread_self(), "dtrain-looplag");
  std::unique_lock lock(mutex_);
  while (!done_) {
    wake_.wait_until(lock, last_turn_ + period_, [this] { return done_; });
    // Read under the mutex, as stalled() does, so that what a caller saw as an open gap is never more than what
    // this turn closes: stalled() never decreases.
    const auto now = Clock::now();
    stalled_ = stalled_at(now);
    last_turn_ = now;
  }
}

}  // namespace dtrain

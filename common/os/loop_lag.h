#pragma once

// How long this process could not run. The steady clock (CLOCK_MONOTONIC) keeps advancing while a process is
// stopped (SIGSTOP, a frozen container or VM) or starved of CPU, so a timeout measured on it alone charges a peer
// for time in which this process was not listening: a launcher stopped for 2.7 s with a 3 s node timeout found
// every node silent the moment it resumed. A ticker thread wakes every `period`; each gap between two of its turns
// longer than period + slack counts, beyond the period, as stalled time. Silence is judged on the live clock, the
// steady clock less the stalls, which advances only while this process runs.
//
// A stall is seen even before the ticker has run again: stalled() counts the gap still open at the call (after a
// SIGCONT, the thread that asks may be scheduled before the ticker). What a stall shorter than period + slack costs
// is not counted: at most one period of a long stall goes uncredited.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace dtrain {

class LoopLag {
 public:
  using Clock = std::chrono::steady_clock;
  // Twenty turns a second: a stall is credited to within 50 ms, for a wake-up the CPU does not notice.
  static constexpr std::chrono::milliseconds kPeriod{50};
  // A turn this much late is ordinary scheduling on a loaded machine, not a stall.
  static constexpr std::chrono::milliseconds kSlack{50};

  explicit LoopLag(std::chrono::milliseconds period = kPeriod, std::chrono::milliseconds slack = kSlack);
  ~LoopLag();
  LoopLag(const LoopLag&) = delete;
  LoopLag& operator=(const LoopLag&) = delete;

  // The time this process could not run since construction. Never decreases.
  Clock::duration stalled() const;
  // The steady clock less stalled().
  Clock::time_point live_now() const;

 private:
  void run();
  // stalled() at `now`, with the mutex held.
  Clock::duration stalled_at(Clock::time_point now) const;

  const Clock::duration period_;
  const Clock::duration slack_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Clock::time_point last_turn_ = Clock::now();
  Clock::duration stalled_{0};   // the closed gaps' excess
  bool done_ = false;
  std::thread ticker_;
};

}  // namespace dtrain

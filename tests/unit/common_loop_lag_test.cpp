// LoopLag on a real clock and a real SIGSTOP: a running process has no stall to speak of, a stopped one has its stop
// counted (within one period), including before the ticker thread has run again.

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "common/os/loop_lag.h"
#include "stop_self.h"

using namespace dtrain;
using namespace std::chrono_literals;

TEST_CASE("loop lag: a process that runs has (almost) no stall, and the live clock keeps time") {
  LoopLag lag;
  const auto live = lag.live_now();
  const auto steady = LoopLag::Clock::now();
  std::this_thread::sleep_for(500ms);
  // Ordinary scheduling delays are under the slack; a loaded machine may still lose a turn or two.
  CHECK(lag.stalled() < 300ms);
  CHECK(lag.live_now() - live > (LoopLag::Clock::now() - steady) - 300ms);
}

TEST_CASE("loop lag: a SIGSTOP is counted, at once and after the ticker's next turn, and never taken back") {
  LoopLag lag;
  std::this_thread::sleep_for(100ms);
  const auto before = lag.stalled();
  const auto live = lag.live_now();
  stop_self_for(700ms);
  const auto at_once = lag.stalled();   // the ticker may not have run yet
  CHECK(at_once - before >= 700ms - LoopLag::kPeriod - 20ms);
  CHECK(lag.live_now() - live < 300ms);
  std::this_thread::sleep_for(200ms);
  const auto later = lag.stalled();
  CHECK(later >= at_once);
  CHECK(later - before < 700ms + 300ms);
}

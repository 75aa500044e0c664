// HealthWatch on its own clock: the bounds of a quiet rank (a report that says `quiet`, then silence). Quiet turns
// the heartbeat check off; these cases check that it is still bounded, by health.startup_timeout_s, and that a quiet
// rank whose agent sees its process stopped (state T) is judged after the heartbeat timeout.

#include <doctest/doctest.h>

#include <chrono>

#include "cli/controller/diagnose/health_watch.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

using Clock = HealthWatch::Clock;

dtrain::spec::Spec::Health quiet_limits(double heartbeat, double startup) {
  dtrain::spec::Spec::Health h;
  h.heartbeat_timeout_s = heartbeat;
  h.hang_timeout_s = 0;   // the default: no hang check once a rank has stepped
  h.startup_timeout_s = startup;
  h.exit_timeout_s = 120;
  return h;
}

WorkerHealth health_report(std::uint64_t steps_done, bool quiet) {
  WorkerHealth h;
  h.rank = 1;
  h.step = steps_done;
  h.steps_done = steps_done;
  h.quiet = quiet;
  return h;
}

// A rank that started at t0 and made 3 steps by t0 + 1 s, then entered a quiet call at t0 + 2 s.
struct QuietRankWatch {
  HealthWatch watch;
  Clock::time_point t0 = Clock::time_point() + 1h;
  explicit QuietRankWatch(const dtrain::spec::Spec::Health& h) : watch(h) {
    watch.started(1, t0);
    watch.reported(health_report(0, false), t0);
    watch.reported(health_report(3, false), t0 + 1s);
    watch.reported(health_report(3, true), t0 + 2s);
  }
};

}  // namespace

TEST_CASE("health watch: a quiet rank past its first step is judged once quiet lasts health.startup_timeout_s") {
  QuietRankWatch r(quiet_limits(30, 100));
  CHECK_FALSE(r.watch.check(r.t0 + 101s));   // 99 s quiet: no heartbeat check, and within the bound
  const auto failed = r.watch.check(r.t0 + 102s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::quiet);
  CHECK(failed->rank == 1);
  CHECK(failed->what.find("for 100.0 s (the bound is 100 s") != std::string::npos);
  CHECK(r.watch.next_deadline() == r.t0 + 102s);
}

TEST_CASE("health watch: with the start-up check off, quiet is bounded by torch's 30-minute process-group timeout") {
  QuietRankWatch r(quiet_limits(30, 0));
  CHECK_FALSE(r.watch.check(r.t0 + 2s + 1799s));
  const auto failed = r.watch.check(r.t0 + 2s + 1800s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::quiet);
}

TEST_CASE("health watch: a report without quiet ends the bound; a later quiet report starts it again") {
  QuietRankWatch r(quiet_limits(30, 100));
  r.watch.reported(health_report(4, false), r.t0 + 90s);
  r.watch.reported(health_report(4, true), r.t0 + 95s);
  CHECK_FALSE(r.watch.check(r.t0 + 194s));
  const auto failed = r.watch.check(r.t0 + 195s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::quiet);
}

TEST_CASE("health watch: a quiet rank whose process is seen stopped fails after the heartbeat timeout") {
  QuietRankWatch r(quiet_limits(30, 600));
  r.watch.sampled(1, 'S', 1.0, r.t0 + 3s);
  r.watch.sampled(1, 'T', 2.0, r.t0 + 4s);
  CHECK(r.watch.next_deadline() == r.t0 + 34s);
  CHECK_FALSE(r.watch.check(r.t0 + 33s));
  const auto failed = r.watch.check(r.t0 + 34s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::stopped);
  CHECK(failed->what.find("is stopped (its agent has seen its process in state T for 30.0 s") == 0);
}

TEST_CASE("health watch: a stop that ends resets the stopped check; a sleeping quiet rank is not stopped") {
  QuietRankWatch r(quiet_limits(30, 600));
  r.watch.sampled(1, 'T', 3.0, r.t0 + 4s);
  r.watch.sampled(1, 'S', 4.0, r.t0 + 20s);      // SIGCONT: it runs (sleeps in its wait) again
  r.watch.sampled(1, 'S', 5.0, r.t0 + 200s);
  r.watch.sampled(1, 'S', 5.5, r.t0 + 290s);     // its wait uses a little CPU now and then
  CHECK_FALSE(r.watch.check(r.t0 + 300s));   // quiet for 298 s of 600: no failure
  r.watch.sampled(1, 't', 6.0, r.t0 + 301s);      // a tracer's stop counts as stopped too
  const auto failed = r.watch.check(r.t0 + 331s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::stopped);
}

TEST_CASE("health watch: a stopped rank that is not quiet is the heartbeat check's, from its last report") {
  HealthWatch watch(quiet_limits(30, 600));
  const Clock::time_point t0 = Clock::time_point() + 1h;
  watch.started(1, t0);
  watch.reported(health_report(3, false), t0 + 1s);
  watch.sampled(1, 'T', 7.0, t0 + 2s);
  const auto failed = watch.check(t0 + 31s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::heartbeat);
}

TEST_CASE("health watch: a quiet rank whose CPU time stays flat for the heartbeat timeout (10 s at least) is idle") {
  QuietRankWatch r(quiet_limits(3, 600));
  r.watch.sampled(1, 'S', 1.00, r.t0 + 3s);
  r.watch.sampled(1, 'S', 1.01, r.t0 + 5s);    // a wait for a late peer polls: CPU moves now and then
  r.watch.sampled(1, 'S', 1.01, r.t0 + 9s);
  CHECK_FALSE(r.watch.check(r.t0 + 14s));        // 9 s flat: the heartbeat timeout (3 s) is raised to 10 s
  const auto failed = r.watch.check(r.t0 + 15s);
  REQUIRE(failed);
  CHECK(failed->check == HealthFailure::Check::idle);
  CHECK(failed->what.find("has used no CPU time for 10.0 s") == 0);
}

TEST_CASE("health watch: CPU time that moves keeps a quiet rank from being idle; flat CPU without quiet is not judged") {
  QuietRankWatch r(quiet_limits(30, 600));
  for (int s = 3; s < 200; s += 20) r.watch.sampled(1, 'S', s, r.t0 + std::chrono::seconds(s));
  CHECK_FALSE(r.watch.check(r.t0 + 200s));
  HealthWatch loud(quiet_limits(30, 600));
  const Clock::time_point t0 = Clock::time_point() + 1h;
  loud.started(1, t0);
  loud.reported(health_report(3, false), t0);
  loud.sampled(1, 'S', 1.0, t0);
  loud.reported(health_report(3, false), t0 + 25s);   // heartbeats: a Python reporter sleeping between steps
  CHECK_FALSE(loud.check(t0 + 50s));
}

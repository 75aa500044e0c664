// The one accumulator of a rank's steps (the diagnoser's windows and the samples of events.jsonl): a repeated step is
// no step, times are means over the new steps, step/loss/tokens the latest, memory the peak, and take() opens the
// next window without forgetting the last step.
#include <doctest/doctest.h>

#include "cli/report/model/rank_sample.h"

using dtrain::report::RankSample;
using dtrain::report::RankWindow;

namespace {

RankSample step(std::uint64_t n, double step_ms, std::uint64_t rss, double loss) {
  RankSample s;
  s.rank = 2;
  s.step = n;
  s.step_ms = step_ms;
  s.data_wait_ms = step_ms / 10;
  s.loss = loss;
  s.tokens_per_s = 100.0 * static_cast<double>(n);
  s.rss_bytes = rss;
  s.device_mem_used_bytes = rss * 2;
  s.device_mem_total_bytes = 1000;
  return s;
}

}  // namespace

TEST_CASE("a rank's window: heartbeats are no step; mean times, the latest step, peak memory") {
  RankWindow window;
  CHECK(window.steps() == 0);
  CHECK(window.mean().step_ms == 0);
  CHECK(window.add(step(7, 100, 300, 3.0)));
  CHECK_FALSE(window.add(step(7, 900, 900, 9.0)));   // a heartbeat of step 7: nothing changes
  CHECK(window.add(step(8, 200, 200, 2.5)));
  CHECK(window.steps() == 2);
  const RankSample m = window.mean();
  CHECK(m.rank == 2);
  CHECK(m.step == 8);
  CHECK(m.loss == 2.5);
  CHECK(m.tokens_per_s == 800);
  CHECK(m.step_ms == 150);
  CHECK(m.data_wait_ms == 15);
  CHECK(m.own_work_ms() == 15);
  CHECK(m.rss_bytes == 300);
  CHECK(m.device_mem_used_bytes == 600);
  CHECK(m.device_mem_total_bytes == 1000);
}

TEST_CASE("take() returns the window's means and opens the next one, which still knows the last step") {
  RankWindow window;
  window.add(step(1, 10, 1, 1.0));
  window.add(step(2, 30, 1, 1.0));
  CHECK(window.take().step_ms == 20);
  CHECK(window.steps() == 0);
  CHECK_FALSE(window.add(step(2, 50, 1, 1.0)));   // step 2 again: still a heartbeat
  CHECK(window.add(step(3, 50, 1, 1.0)));
  CHECK(window.take().step_ms == 50);
}

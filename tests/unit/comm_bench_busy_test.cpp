// dtrain bench's --busy-ms (trainer/comm/bench.h, busy_ms): each run comes after a random 0..busy_ms ms of compute,
// which the reported time leaves out. On the one-rank local communicator (a collective costs nothing): with busy_ms
// 100 the 12 runs take well over their reported time (the draws' sum, about 600 ms), and that reported time stays
// what it is without busy_ms (under a millisecond a run).
#include <doctest/doctest.h>

#include <chrono>

#include "trainer/comm/bench.h"
#include "trainer/comm/local/communicator.h"

using namespace dtrain::trainer;

TEST_CASE("bench --busy-ms: computes before each run, and leaves that time out of the run's") {
  LocalCommunicator comm;
  CollectiveBenchOptions options;
  options.collective = "allreduce";
  options.sizes_bytes = {4096};
  options.warmup_iterations = 2;
  options.iterations = 10;
  options.busy_ms = 100;
  const auto began = std::chrono::steady_clock::now();
  const auto rows = run_collective_bench(comm, options);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].time_ms < 1.0);
  // 12 draws from [0, 100) ms: their sum is below 120 ms with probability under 1e-7.
  CHECK(wall_ms > 120.0);
  options.busy_ms = 0;
  const auto quick = std::chrono::steady_clock::now();
  run_collective_bench(comm, options);
  CHECK(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - quick).count() < 50.0);
}

// The shm backend when a peer fails, between real processes (fork): a peer SIGKILLed in the middle of a stream of
// collectives becomes a CommError on the others within a fraction of the deadline (its liveness mutex is handed on
// by the kernel); a stalled peer, at the deadline; a rank that never joins fails rank 0's constructor at the
// deadline, naming it, and leaves nothing in /dev/shm.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include "tests/unit/comm_shm_ranks.h"

using namespace shm_test;

namespace {

// Every rank loops over allreduces of 1M floats (4 MiB); the parent SIGKILLs `victim` once every rank is looping
// and returns the time of the kill. `in_segment`: the buffers come from allocate().
std::int64_t kill_while_looping(RankRun& run, int world, int victim, bool in_segment,
                                std::chrono::milliseconds timeout) {
  std::int64_t killed_ns = 0;
  RunOptions options;
  options.timeout = timeout;
  options.chunk_bytes = std::size_t{256} << 10;
  options.during = [&](std::vector<pid_t>& pids, RankReport* reports, const std::string&) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int r = 0; r < world; ++r) {
      while (stage_of(reports[r]) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // well inside the loop
    killed_ns = now_ns();
    ::kill(pids[victim], SIGKILL);
  };
  run = run_ranks(world, [in_segment](ShmCommunicator& comm, RankReport& report) {
    const std::size_t n = std::size_t{1} << 20;
    std::vector<float> user;
    float* data = in_segment ? comm.allocate(n) : (user.assign(n, 1.0f), user.data());
    std::fill(data, data + n, 1.0f);
    set_stage(report, 1);
    for (int i = 0; i < 1'000'000; ++i) comm.allreduce(data, n)->wait();
  }, options);
  return killed_ns;
}

}  // namespace

TEST_CASE("a peer SIGKILLed mid-collective makes the others fail with CommError within a fraction of the deadline") {
  for (bool in_segment : {false, true}) {
    CAPTURE(in_segment);
    const auto timeout = std::chrono::milliseconds(5000);
    RankRun run;
    const std::int64_t killed_ns = kill_while_looping(run, 3, 1, in_segment, timeout);
    REQUIRE(killed_ns > 0);
    CHECK(WIFSIGNALED(run.status[1]));
    for (int rank : {0, 2}) {
      CAPTURE(rank);
      const RankReport& report = run.reports[rank];
      INFO(report.message);
      CHECK(report.code == 2);
      const double after_ms = static_cast<double>(report.failed_ns - killed_ns) / 1e6;
      CAPTURE(after_ms);
      CHECK(after_ms < 1000);  // the liveness poll is 50 ms; the deadline is 5 s
      const std::string message = report.message;
      CHECK(message.find("allreduce of 1048576 floats") != std::string::npos);
      CHECK(message.find("rank " + std::to_string(rank) + " of 3") != std::string::npos);
      CHECK(message.find("rank 1 (pid") != std::string::npos);
      CHECK(message.find("is gone") != std::string::npos);
    }
  }
}

TEST_CASE("a stalled peer fails the others' collective at the deadline, not before and not never") {
  RunOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  const RankRun run = run_ranks(2, [](ShmCommunicator& comm, RankReport& report) {
    std::vector<float> data(1000, 1.0f);
    comm.allreduce(data.data(), data.size())->wait();
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    report.mark_ns = now_ns();
    comm.allreduce(data.data(), data.size())->wait();
  }, options);
  const RankReport& report = run.reports[0];
  INFO(report.message);
  REQUIRE(report.code == 2);
  const double after_ms = static_cast<double>(report.failed_ns - report.mark_ns) / 1e6;
  CAPTURE(after_ms);
  CHECK(after_ms >= 900);
  CHECK(after_ms < 2000);
  CHECK(std::string(report.message).find("within the timeout of 1.0 s") != std::string::npos);
  CHECK(run.reports[1].code == 0);
}

TEST_CASE("a rank that never joins fails rank 0's communicator at the deadline, and the segment is removed") {
  RunOptions options;
  options.timeout = std::chrono::milliseconds(800);
  options.before_join = [](int rank) {
    if (rank == 1) ::_exit(0);
  };
  const RankRun run = run_ranks(2, [](ShmCommunicator&, RankReport&) {}, options);
  const RankReport& report = run.reports[0];
  INFO(report.message);
  CHECK(report.code == 2);
  CHECK(std::string(report.message).find("missing: rank(s) 1") != std::string::npos);
  struct stat st {};
  CHECK(::stat(("/dev/shm/" + run.name).c_str(), &st) != 0);
}

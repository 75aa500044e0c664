// The shm backend's send() and recv() when something goes wrong, between real processes (fork): a silent peer
// fails the recv at the timeout; a killed peer fails it within a fraction of it, after what the peer sent before
// dying has been delivered; a Work dropped unfinished breaks point-to-point (later messages would pair wrongly); a
// peer or stream that does not exist is refused at once. Every failure names the message, the rank and the peer.
#include <doctest/doctest.h>

#include "tests/unit/comm_shm_ranks.h"

using namespace shm_test;

TEST_CASE("shm point-to-point: a peer that never sends fails recv's wait() after the timeout, naming the peer") {
  RunOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  options.during = [](std::vector<pid_t>&, RankReport* reports, const std::string&) {
    // Lets rank 1 go once rank 0 has finished.
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (__atomic_load_n(&reports[0].code, __ATOMIC_SEQ_CST) == -1 && std::chrono::steady_clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    set_stage(reports[1], 1);
  };
  const RankRun run = run_ranks(2, [](ShmCommunicator& comm, RankReport& report) {
    std::vector<float> data(10);
    if (comm.rank() == 1) {  // stays until rank 0 has seen the failure: its exit would fail it at once
      while (stage_of(report) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    auto work = comm.recv(data.data(), data.size(), 1);
    const std::string message = shm_error_of([&] { work->wait(); });
    const auto waited = std::chrono::steady_clock::now() - start;
    std::snprintf(report.message, sizeof(report.message), "%s", message.c_str());
    expect_text(message, "shm recv of 10 floats");
    expect_text(message, "from rank 1");
    expect_text(message, "rank 0 of 2");
    expect_text(message, "1.5 s");
    expect_text(message, "It is alive");
    if (!work->done()) throw std::runtime_error("a failed recv is not done");
    if (waited < std::chrono::milliseconds(1400) || waited > std::chrono::seconds(5)) {
      throw std::runtime_error("waited " + std::to_string(waited.count() / 1'000'000) + " ms, not 1.5 s");
    }
    const std::string send = shm_error_of([&] { comm.send(data.data(), data.size(), 1)->wait(); });
    expect_text(send, "was not posted");
    expect_text(send, "an earlier send or recv failed");
  }, options);
  CHECK(run.reports[0].code == 0);
  INFO(run.reports[0].message);
  CHECK(std::string(run.reports[0].message).find("from rank 1") != std::string::npos);
}

TEST_CASE("shm point-to-point: a killed peer's sent message is delivered, and the next recv fails within 1 s") {
  RunOptions options;
  options.timeout = std::chrono::milliseconds(10'000);
  options.ring_bytes = std::size_t{64} << 10;
  const RankRun run = run_ranks(2, [](ShmCommunicator& comm, RankReport& report) {
    std::vector<float> small(1000, 3.0f), big(1'000'000, 4.0f);
    if (comm.rank() == 1) {
      comm.send(small.data(), small.size(), 0)->wait();
      auto partial = comm.send(big.data(), big.size(), 0);  // stays partial: rank 0 reads it only later
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ::kill(::getpid(), SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 1 is dead by now
    std::vector<float> got(small.size(), 0.0f);
    comm.recv(got.data(), got.size(), 1)->wait();
    if (got != small) throw std::runtime_error("the dead peer's complete message did not arrive whole");
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> rest(big.size());
    const std::string message = shm_error_of([&] { comm.recv(rest.data(), rest.size(), 1)->wait(); });
    report.mark_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                         .count();
    std::snprintf(report.message, sizeof(report.message), "%s", message.c_str());
    expect_text(message, "shm recv of 1000000 floats");
    expect_text(message, "rank 1 (pid");
    expect_text(message, "is gone");
  }, options);
  CHECK(WIFSIGNALED(run.status[1]));
  INFO(run.reports[0].message);
  CHECK(run.reports[0].code == 0);
  CHECK(run.reports[0].mark_ns < 1'000'000'000);
}

TEST_CASE("shm point-to-point: a Work dropped before its message came breaks point-to-point, naming it") {
  const RankRun run = run_ranks(2, [](ShmCommunicator& comm, RankReport& report) {
    std::vector<float> data(100, 1.0f);
    if (comm.rank() == 1) return;
    comm.recv(data.data(), data.size(), 1).reset();  // never waited for
    const std::string message = shm_error_of([&] { comm.send(data.data(), data.size(), 1)->wait(); });
    std::snprintf(report.message, sizeof(report.message), "%s", message.c_str());
    expect_text(message, "recv of 100 floats (0.0 MiB) from rank 1 on stream 0 was given up");
    expect_text(message, "destroyed");
  });
  INFO(run.reports[0].message);
  CHECK(run.reports[0].code == 0);
  CHECK(run.reports[1].code == 0);
}

TEST_CASE("shm point-to-point: this rank, a rank that does not exist and a stream beyond 15 are refused at once") {
  const RankRun run = run_ranks(2, [](ShmCommunicator& comm, RankReport&) {
    std::vector<float> data(4);
    const int self = comm.rank();
    expect_text(shm_error_of([&] { comm.send(data.data(), 4, self); }), "itself");
    expect_text(shm_error_of([&] { comm.recv(data.data(), 4, self); }), "itself");
    expect_text(shm_error_of([&] { comm.send(data.data(), 4, 2); }), "rank 2 is not a rank of this communicator of 2");
    expect_text(shm_error_of([&] { comm.recv(data.data(), 4, -1); }), "rank -1 is not a rank");
    expect_text(shm_error_of([&] { comm.send(data.data(), 4, 1 - self, 16); }), "stream 16 is not in [0, 16)");
    if (comm.bytes_sent() != 0) throw std::runtime_error("a refused send counted bytes");
    // A refusal leaves point-to-point whole.
    std::vector<float> got(4, 0.0f), mine(4, static_cast<float>(self + 1));
    auto sent = comm.send(mine.data(), 4, 1 - self);
    comm.recv(got.data(), 4, 1 - self)->wait();
    sent->wait();
    if (got[0] != static_cast<float>(2 - self)) throw std::runtime_error("the message after the refusals");
  });
  for (const auto& report : run.reports) {
    INFO(report.message);
    CHECK(report.code == 0);
  }
}

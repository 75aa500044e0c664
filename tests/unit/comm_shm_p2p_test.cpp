// Point-to-point send() and recv() of the shm backend (shm/p2p.h) between real processes (fork): messages longer
// than the ring stream through it in order and exact; streams and rings never hold each other back; a message that
// fits is complete when send() returns; a wrong size, a silent peer, a killed peer and a dropped Work each fail with
// a CommError that names them, and never hang. Values are integers held in floats, so what arrives is compared
// exactly.
#include <doctest/doctest.h>

#include <memory>

#include "tests/unit/comm_shm_ranks.h"

using namespace shm_test;
using dtrain::trainer::Communicator;
using dtrain::trainer::Work;

namespace {

// Small rings, so that most messages here stream through the sender thread.
constexpr std::size_t kRing = std::size_t{64} << 10;

std::vector<float> ring_payload(int source, int message, std::size_t count) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) {
    data[i] = static_cast<float>(source * 100'000 + message * 1'000 + static_cast<int>(i % 997));
  }
  return data;
}

void expect_payload(const std::vector<float>& got, int source, int message, const std::string& what) {
  const std::vector<float> want = ring_payload(source, message, got.size());
  expect_same(got.data(), want.data(), got.size(), what);
}

void expect_that(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

void require_ranks_returned(const RankRun& run) {
  for (std::size_t r = 0; r < run.reports.size(); ++r) {
    CAPTURE(r);
    INFO(run.reports[r].message);
    CHECK(run.reports[r].code == 0);
  }
}

RunOptions small_rings_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000)) {
  RunOptions options;
  options.ring_bytes = kRing;
  options.timeout = timeout;
  return options;
}

}  // namespace

TEST_CASE("shm point-to-point: messages of every size arrive in the order they were sent, exact") {
  const std::vector<std::size_t> sizes = {1, 300'001, 1'000, 16'382};  // 16'382 floats + header fill the ring
  const RankRun run = run_ranks(2, [&](ShmCommunicator& comm, RankReport&) {
    if (comm.rank() == 0) {
      std::vector<std::vector<float>> messages;
      for (std::size_t m = 0; m < sizes.size(); ++m) messages.push_back(ring_payload(0, static_cast<int>(m), sizes[m]));
      std::vector<std::shared_ptr<Work>> works;  // all in flight at once
      for (auto& message : messages) works.push_back(comm.send(message.data(), message.size(), 1));
      for (auto& work : works) work->wait();
      for (auto& work : works) expect_that(work->done(), "a waited send is not done");
      expect_that(comm.bytes_sent() == (1 + 300'001 + 1'000 + 16'382) * 4, "bytes_sent is not 4 bytes a float sent");
    } else {
      for (std::size_t m = 0; m < sizes.size(); ++m) {
        std::vector<float> data(sizes[m], -1.0f);
        auto work = comm.recv(data.data(), data.size(), 0);
        work->wait();
        expect_that(work->done() && work->elapsed_ms() >= 0, "a waited recv is not done");
        expect_payload(data, 0, static_cast<int>(m), "message " + std::to_string(m));
      }
      expect_that(comm.bytes_sent() == 0, "a recv counted bytes as sent");
    }
  }, small_rings_options());
  require_ranks_returned(run);
}

TEST_CASE("shm point-to-point: a message that fits the ring is complete when send() returns") {
  const RankRun run = run_ranks(2, [&](ShmCommunicator& comm, RankReport&) {
    const auto data = ring_payload(0, 1, 10'000);  // 40 KB, in a 64 KiB ring
    std::vector<float> ping(1, 0.0f);
    if (comm.rank() == 0) {
      auto sent = comm.send(data.data(), data.size(), 1);
      expect_that(sent->done(), "a 40 KB send into an empty 64 KiB ring was not complete at once");
      comm.send(ping.data(), 1, 1, 3)->wait();  // only now does rank 1 post its recv
    } else {
      comm.recv(ping.data(), 1, 0, 3)->wait();
      std::vector<float> got(data.size(), -1.0f);
      comm.recv(got.data(), got.size(), 0)->wait();
      expect_payload(got, 0, 1, "the early message");
    }
  }, small_rings_options());
  require_ranks_returned(run);
}

TEST_CASE("shm point-to-point: a full ring of one stream holds back neither another stream nor another peer") {
  // Rank 0 sends 1 MB on stream 0 to rank 1 (16 rings' worth), then small messages on stream 1 to rank 1 and on
  // stream 0 to rank 2. Rank 1 takes stream 1 first, and rank 2 its message, while stream 0's ring stays full.
  const RankRun run = run_ranks(3, [&](ShmCommunicator& comm, RankReport&) {
    const auto big = ring_payload(0, 0, 250'000), small = ring_payload(0, 1, 100), other = ring_payload(0, 2, 100);
    std::vector<float> go(1, 0.0f);  // stream 2: rank 1 reads stream 0 only once rank 0 has looked
    if (comm.rank() == 0) {
      auto a = comm.send(big.data(), big.size(), 1, 0);
      auto b = comm.send(small.data(), small.size(), 1, 1);
      auto c = comm.send(other.data(), other.size(), 2, 0);
      expect_that(!a->done(), "1 MB went through a 64 KiB ring before its receiver read it");
      expect_that(b->done() && c->done(), "the small sends waited behind the big one");
      comm.send(go.data(), 1, 1, 2)->wait();
      a->wait();
    } else if (comm.rank() == 1) {
      std::vector<float> got_small(100, -1.0f), got_big(big.size(), -1.0f);
      comm.recv(got_small.data(), got_small.size(), 0, 1)->wait();
      expect_payload(got_small, 0, 1, "stream 1");
      comm.recv(go.data(), 1, 0, 2)->wait();
      comm.recv(got_big.data(), got_big.size(), 0, 0)->wait();
      expect_payload(got_big, 0, 0, "stream 0");
    } else {
      std::vector<float> got(100, -1.0f);
      comm.recv(got.data(), got.size(), 0, 0)->wait();
      expect_payload(got, 0, 2, "rank 2's");
    }
  }, small_rings_options());
  require_ranks_returned(run);
}

TEST_CASE("shm point-to-point: every rank sends, then receives, at once: 2 ranks both ways, 4 ranks in a ring") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    const RankRun run = run_ranks(world, [&](ShmCommunicator& comm, RankReport&) {
      const std::size_t count = 1'000'003;  // 61 rings' worth: send() must return before its receiver reads
      const int right = (comm.rank() + 1) % world, left = (comm.rank() + world - 1) % world;
      const auto mine = ring_payload(comm.rank(), 7, count);
      std::vector<float> theirs(count, -1.0f);
      auto sent = comm.send(mine.data(), count, right);
      auto received = comm.recv(theirs.data(), count, left);
      received->wait();
      sent->wait();
      expect_payload(theirs, left, 7, "from the left");
    }, small_rings_options());
    require_ranks_returned(run);
  }
}

TEST_CASE("shm point-to-point: a recv of another size fails, naming both sizes, and so does every later one") {
  const RankRun run = run_ranks(2, [&](ShmCommunicator& comm, RankReport& report) {
    std::vector<float> data(100, 1.0f), sum(4, 1.0f);
    if (comm.rank() == 0) {
      comm.send(data.data(), 100, 1)->wait();
      comm.allreduce(sum.data(), sum.size())->wait();
      return;
    }
    const std::string message = shm_error_of([&] { comm.recv(data.data(), 50, 0)->wait(); });
    std::snprintf(report.message, sizeof(report.message), "%s", message.c_str());
    expect_that(message.find("recv of 50 floats") != std::string::npos, message);
    expect_that(message.find("rank 0 sent 100 floats") != std::string::npos, message);
    const std::string later = shm_error_of([&] { comm.recv(data.data(), 100, 0, 2)->wait(); });
    expect_that(later.find("an earlier send or recv failed") != std::string::npos, later);
    comm.allreduce(sum.data(), sum.size())->wait();  // the collectives are not affected
    expect_that(sum[0] == 2.0f, "the allreduce after the failure");
  }, small_rings_options());
  require_ranks_returned(run);
  CHECK(std::string(run.reports[1].message).find("rank 0 sent 100 floats") != std::string::npos);
}

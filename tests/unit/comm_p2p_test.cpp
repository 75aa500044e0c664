// Point-to-point send() and recv() (pipeline parallelism) on the Gloo backend between ranks that are threads of this
// process, over a real store and real TCP; and the refusal of the backends without them. Values are integers held in
// floats, so what arrives is compared exactly.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/local/communicator.h"

using namespace std::chrono_literals;
using dtrain::trainer::CommError;
using dtrain::trainer::GlooCommunicator;
using dtrain::trainer::Work;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kP2pToken[] = "comm-p2p-test-token-round-0";

// Element i of message `message` from rank `source`: distinct per source, message and index.
float p2p_value(int source, int message, std::size_t i) {
  return static_cast<float>(source * 100'000 + message * 1'000 + static_cast<int>(i % 997));
}

std::vector<float> p2p_message(int source, int message, std::size_t count) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = p2p_value(source, message, i);
  return data;
}

std::size_t p2p_wrong(const std::vector<float>& data, int source, int message) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < data.size(); ++i) wrong += data[i] != p2p_value(source, message, i);
  return wrong;
}

// Runs body(comm) on `size` ranks, each a thread with its own communicator whose rendezvous and operations have
// the deadline `timeout`; rethrows the first failure.
void on_p2p_ranks(GlooRanks& ranks, int size, const std::string& prefix, std::chrono::milliseconds timeout,
                  const std::function<void(GlooCommunicator&)>& body) {
  std::vector<std::future<void>> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.push_back(std::async(std::launch::async, [&, rank] {
      auto comm = ranks.join(rank, size, prefix, timeout);
      body(*comm);
    }));
  }
  for (auto& thread : threads) thread.get();
}

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& error) {
    return error.what();
  }
  FAIL("no CommError");
  return "";
}

}  // namespace

TEST_CASE("point-to-point: three messages of different sizes arrive in the order they were sent, exact") {
  GlooRanks ranks(kP2pToken);
  const std::vector<std::size_t> sizes = {1, 300'001, 1'000};
  on_p2p_ranks(ranks, 2, "p2p-order/", 5s, [&](GlooCommunicator& comm) {
    if (comm.rank() == 0) {
      std::vector<std::vector<float>> messages;
      for (std::size_t m = 0; m < sizes.size(); ++m) messages.push_back(p2p_message(0, static_cast<int>(m), sizes[m]));
      // All three in flight at once: the order is the order of the calls, not of the waits.
      std::vector<std::shared_ptr<Work>> works;
      for (auto& message : messages) works.push_back(comm.send(message.data(), message.size(), 1));
      for (auto& work : works) work->wait();
      for (auto& work : works) CHECK(work->done());
    } else {
      for (std::size_t m = 0; m < sizes.size(); ++m) {
        CAPTURE(m);
        std::vector<float> data(sizes[m], -1.0f);
        auto work = comm.recv(data.data(), data.size(), 0);
        work->wait();
        CHECK(work->done());
        CHECK(work->elapsed_ms() > 0);
        CHECK(p2p_wrong(data, 0, static_cast<int>(m)) == 0);
      }
    }
  });
}

TEST_CASE("point-to-point: streams keep their own orders: received in another order than sent across streams") {
  GlooRanks ranks(kP2pToken);
  on_p2p_ranks(ranks, 2, "p2p-streams/", 5s, [&](GlooCommunicator& comm) {
    if (comm.rank() == 0) {  // stream 0 first, then stream 1
      std::vector<float> first = p2p_message(0, 0, 1'000), second = p2p_message(0, 1, 1'000);
      auto a = comm.send(first.data(), first.size(), 1, 0);
      auto b = comm.send(second.data(), second.size(), 1, 1);
      a->wait();
      b->wait();
    } else {  // stream 1 first: it gets stream 1's message, not the first one sent
      std::vector<float> got1(1'000, -1.0f), got0(1'000, -1.0f);
      comm.recv(got1.data(), got1.size(), 0, 1)->wait();
      comm.recv(got0.data(), got0.size(), 0, 0)->wait();
      CHECK(p2p_wrong(got1, 0, 1) == 0);
      CHECK(p2p_wrong(got0, 0, 0) == 0);
    }
  });
  on_p2p_ranks(ranks, 2, "p2p-bad-stream/", 5s, [&](GlooCommunicator& comm) {
    std::vector<float> data(4);
    CHECK(message_of([&] { comm.send(data.data(), data.size(), 1 - comm.rank(), Communicator::kP2pStreams); })
              .find("stream 16 is not in [0, 16)") != std::string::npos);
  });
}

TEST_CASE("point-to-point: every rank sends, then receives, at once: 2 ranks both ways, 4 ranks in a ring") {
  GlooRanks ranks(kP2pToken);
  // Several MiB: more than the sockets hold, so a send() that waited for its receiver before returning would leave
  // every rank stuck in it.
  const std::size_t count = 1'000'003;
  for (int size : {2, 4}) {
    CAPTURE(size);
    on_p2p_ranks(ranks, size, "p2p-ring/" + std::to_string(size) + "/", 5s, [&](GlooCommunicator& comm) {
      const int right = (comm.rank() + 1) % size;
      const int left = (comm.rank() + size - 1) % size;
      const auto mine = p2p_message(comm.rank(), 7, count);
      std::vector<float> theirs(count, -1.0f);
      auto sent = comm.send(mine.data(), count, right);
      auto received = comm.recv(theirs.data(), count, left);
      received->wait();
      sent->wait();
      CHECK(p2p_wrong(theirs, left, 7) == 0);
    });
  }
}

TEST_CASE("point-to-point: a recv waiting for its peer does not hold back a collective issued after it") {
  GlooRanks ranks(kP2pToken);
  std::promise<void> reduced;  // rank 0's allreduce finished while its recv was still waiting
  auto reduced_seen = reduced.get_future().share();
  on_p2p_ranks(ranks, 2, "p2p-queue/", 5s, [&](GlooCommunicator& comm) {
    std::vector<float> sum(1'000, static_cast<float>(comm.rank() + 1));
    const auto activations = p2p_message(1, 3, 5'000);
    if (comm.rank() == 0) {
      std::vector<float> data(activations.size(), -1.0f);
      auto received = comm.recv(data.data(), data.size(), 1);
      comm.allreduce(sum.data(), sum.size())->wait();
      CHECK(!received->done());
      reduced.set_value();
      received->wait();
      CHECK(p2p_wrong(data, 1, 3) == 0);
    } else {
      comm.allreduce(sum.data(), sum.size())->wait();
      reduced_seen.wait();
      comm.send(activations.data(), activations.size(), 0)->wait();
    }
    CHECK(sum.front() == 3.0f);
    CHECK(sum.back() == 3.0f);
  });
}

TEST_CASE("point-to-point: a peer that never sends fails recv's wait() after the timeout, naming the peer") {
  GlooRanks ranks(kP2pToken);
  std::promise<void> finished;  // rank 1 stays until rank 0 has seen the failure: its exit would fail it at once
  auto finished_seen = finished.get_future().share();
  on_p2p_ranks(ranks, 2, "p2p-silent/", 1500ms, [&](GlooCommunicator& comm) {
    if (comm.rank() == 1) {
      finished_seen.wait();
      return;
    }
    std::vector<float> data(10);
    const auto start = Clock::now();
    auto work = comm.recv(data.data(), data.size(), 1);
    const std::string message = message_of([&] { work->wait(); });
    const auto waited = Clock::now() - start;
    INFO(message);
    CHECK(message.find("recv of 10 floats") != std::string::npos);
    CHECK(message.find("from rank 1") != std::string::npos);
    CHECK(message.find("rank 0 of 2") != std::string::npos);
    CHECK(message.find("1.5 s") != std::string::npos);
    CHECK(work->done());
    CHECK(waited >= 1400ms);
    CHECK(waited < 5s);
    // The communicator is broken: a collective and another send fail at once, with that failure.
    const auto later = Clock::now();
    const std::string collective = message_of([&] { comm.allreduce(data.data(), data.size())->wait(); });
    CHECK(collective.find("an earlier operation on this communicator failed") != std::string::npos);
    CHECK(collective.find("recv of 10 floats") != std::string::npos);
    const std::string send = message_of([&] { comm.send(data.data(), data.size(), 1)->wait(); });
    CHECK(send.find("was not posted") != std::string::npos);
    CHECK(Clock::now() - later < 1s);
    finished.set_value();
  });
}

TEST_CASE("point-to-point: a peer that is this rank or not a rank at all is refused with CommError") {
  GlooRanks ranks(kP2pToken);
  on_p2p_ranks(ranks, 2, "p2p-peer/", 5s, [&](GlooCommunicator& comm) {
    std::vector<float> data(4);
    const int self = comm.rank();
    const std::string to_self = message_of([&] { comm.send(data.data(), data.size(), self); });
    CHECK(to_self.find("rank " + std::to_string(self)) != std::string::npos);
    CHECK(to_self.find("itself") != std::string::npos);
    const std::string from_self = message_of([&] { comm.recv(data.data(), data.size(), self); });
    CHECK(from_self.find("itself") != std::string::npos);
    const std::string beyond = message_of([&] { comm.send(data.data(), data.size(), 2); });
    CHECK(beyond.find("rank 2 is not a rank of this communicator of 2 ranks") != std::string::npos);
    const std::string negative = message_of([&] { comm.recv(data.data(), data.size(), -1); });
    CHECK(negative.find("rank -1 is not a rank") != std::string::npos);
    CHECK(comm.bytes_sent() == 0);
    // A refusal leaves the communicator whole; and neither rank leaves while the other may still be connecting.
    std::vector<float> sum(4, 1.0f);
    comm.allreduce(sum.data(), sum.size())->wait();
    CHECK(sum.front() == 2.0f);
  });
}

TEST_CASE("point-to-point: the local communicator refuses send and recv, naming its backend") {
  dtrain::trainer::LocalCommunicator comm;
  std::vector<float> data(4);
  const std::string send = message_of([&] { comm.send(data.data(), data.size(), 1); });
  CHECK(send.find("point-to-point is not supported by the local backend") != std::string::npos);
  const std::string recv = message_of([&] { comm.recv(data.data(), data.size(), 1); });
  CHECK(recv.find("point-to-point is not supported by the local backend") != std::string::npos);
}

TEST_CASE("point-to-point: bytes_sent grows by 4 bytes a float with each send, not with a recv") {
  GlooRanks ranks(kP2pToken);
  on_p2p_ranks(ranks, 2, "p2p-bytes/", 5s, [&](GlooCommunicator& comm) {
    std::vector<float> data = p2p_message(0, 0, 1'234);
    const std::uint64_t before = comm.bytes_sent();
    if (comm.rank() == 0) {
      comm.send(data.data(), data.size(), 1)->wait();
      CHECK(comm.bytes_sent() - before == 1'234 * 4);
    } else {
      comm.recv(data.data(), data.size(), 0)->wait();
      CHECK(comm.bytes_sent() == before);
    }
  });
}

TEST_CASE("point-to-point: a recv dropped before its message came breaks the communicator, not the process") {
  GlooRanks ranks(kP2pToken);
  on_p2p_ranks(ranks, 2, "p2p-dropped/", 5s, [&](GlooCommunicator& comm) {
    std::vector<float> data(100, 1.0f);
    if (comm.rank() == 0) {
      const auto start = Clock::now();
      comm.recv(data.data(), data.size(), 1).reset();  // never waited for: given up, which closes the connections
      const std::string message = message_of([&] { comm.allreduce(data.data(), data.size())->wait(); });
      INFO(message);
      CHECK(message.find("recv of 100 floats") != std::string::npos);
      CHECK(message.find("destroyed") != std::string::npos);
      CHECK(Clock::now() - start < 2s);
    } else {
      // The closed connections fail this rank's collective at once too, rather than after the timeout.
      const auto start = Clock::now();
      CHECK_THROWS_AS(comm.allreduce(data.data(), data.size())->wait(), CommError);
      CHECK(Clock::now() - start < 2s);
    }
  });
}

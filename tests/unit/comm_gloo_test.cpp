// The Gloo backend between ranks that are threads of this process: a real store (StoreService on 127.0.0.1:0),
// real rendezvous through it, real TCP between the ranks. Values are integers held in floats, so sums are exact.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/store/client.h"
#include "agent/store/store.h"
#include "agent/store/testing/in_process_store.h"
#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/bench.h"
#include "trainer/comm/gloo/communicator.h"
#include "trainer/parallel/ddp/reducer.h"

using namespace std::chrono_literals;
using dtrain::trainer::CommError;
using dtrain::trainer::DdpOptions;
using dtrain::trainer::DdpReducer;
using dtrain::trainer::GlooCommOptions;
using dtrain::trainer::GlooCommunicator;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kToken[] = "comm-gloo-test-token-round-0";

struct StoreServer : GlooRanks {
  StoreServer() : GlooRanks(kToken) {}
};

// Rank r's input element i: a small integer, distinct per rank and index.
float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)); }

float sum_over_ranks(int size, std::size_t i) {
  float total = 0;
  for (int r = 0; r < size; ++r) total += value(r, i);
  return total;
}

}  // namespace

TEST_CASE("allreduce, reduce_scatter, all_gather and broadcast give exact results on 2, 3 and 4 ranks") {
  StoreServer server;
  for (int size : {2, 3, 4}) {
    CAPTURE(size);
    on_ranks(server, size, "t1/" + std::to_string(size) + "/", [size](int, GlooCommunicator& comm) {
      const int rank = comm.rank();
      CHECK(comm.size() == size);
      CHECK(comm.backend() == "gloo");

      // Sizes that do not divide evenly into gloo's ring segments, and more than one 1 MiB segment.
      for (std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{700'001}}) {
        std::vector<float> data(count);
        for (std::size_t i = 0; i < count; ++i) data[i] = value(rank, i);
        comm.allreduce(data.data(), count)->wait();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) wrong += data[i] != sum_over_ranks(size, i);
        CHECK(wrong == 0);
      }

      // One segment, and several with a short last one; then in place (the output is this rank's input chunk).
      for (std::size_t chunk : {std::size_t{12'345}, std::size_t{600'001}}) {
        std::vector<float> in(chunk * size);
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(rank, i);
        std::vector<float> out(chunk, -1.0f);
        comm.reduce_scatter(in.data(), out.data(), chunk)->wait();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < chunk; ++i) wrong += out[i] != sum_over_ranks(size, rank * chunk + i);
        CHECK(wrong == 0);
        comm.reduce_scatter(in.data(), in.data() + rank * chunk, chunk)->wait();
        CHECK(std::equal(out.begin(), out.end(), in.begin() + rank * chunk));
      }

      const std::size_t per_rank = 12'345;
      std::size_t wrong = 0;
      std::vector<float> mine(per_rank);
      for (std::size_t i = 0; i < per_rank; ++i) mine[i] = value(rank, i);
      std::vector<float> gathered(per_rank * size, -1.0f);
      comm.all_gather(mine.data(), gathered.data(), per_rank)->wait();
      for (int r = 0; r < size; ++r) {
        for (std::size_t i = 0; i < per_rank; ++i) wrong += gathered[r * per_rank + i] != value(r, i);
      }
      CHECK(wrong == 0);

      // In place: the input already sits in this rank's chunk of the output.
      std::vector<float> in_place(per_rank * size, -1.0f);
      std::copy(mine.begin(), mine.end(), in_place.begin() + rank * per_rank);
      comm.all_gather(in_place.data() + rank * per_rank, in_place.data(), per_rank)->wait();
      CHECK(in_place == gathered);

      const int root = size - 1;
      std::vector<float> params(50'000);
      for (std::size_t i = 0; i < params.size(); ++i) params[i] = value(rank, i);
      comm.broadcast(params.data(), params.size(), root)->wait();
      wrong = 0;
      for (std::size_t i = 0; i < params.size(); ++i) wrong += params[i] != value(root, i);
      CHECK(wrong == 0);

      CHECK_THROWS_AS(comm.broadcast(params.data(), params.size(), size), CommError);
    });
  }
}

TEST_CASE("collectives queue and complete in issue order without waiting in between") {
  StoreServer server;
  on_ranks(server, 2, "order/", [](int, GlooCommunicator& comm) {
    std::vector<std::vector<float>> buffers(8, std::vector<float>(100'000));
    std::vector<std::shared_ptr<dtrain::trainer::Work>> works;
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      std::fill(buffers[b].begin(), buffers[b].end(), static_cast<float>(b + comm.rank()));
      works.push_back(comm.allreduce(buffers[b].data(), buffers[b].size()));
    }
    for (auto& work : works) work->wait();
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      CHECK(works[b]->done());
      CHECK(works[b]->elapsed_ms() > 0);
      CHECK(buffers[b].front() == static_cast<float>(2 * b + 1));
      CHECK(buffers[b].back() == static_cast<float>(2 * b + 1));
    }
  });
}

TEST_CASE("DdpReducer over 3 ranks with gradients ready in reverse chunks yields the mean") {
  StoreServer server;
  on_ranks(server, 3, "ddp/", [](int, GlooCommunicator& comm) {
    const std::size_t count = 3 * 100'000 + 17;
    std::vector<float> grads(count);
    // Small buckets so there are many, of uneven sizes.
    DdpReducer reducer(comm, grads.data(), count, DdpOptions{40'000 * sizeof(float), 120'000 * sizeof(float)});
    CHECK(reducer.buckets().size() == 4);
    for (int pass = 0; pass < 2; ++pass) {
      // Values whose mean over ranks 0..2 is exact: 3 * k * (rank + 1) averages to 6k.
      for (std::size_t i = 0; i < count; ++i) grads[i] = static_cast<float>(3 * (i % 101 + pass) * (comm.rank() + 1));
      reducer.begin_backward(true);
      for (std::size_t end = count; end > 0;) {
        std::size_t size = std::min<std::size_t>(7'777, end);
        reducer.grads_ready(end - size, size);
        end -= size;
      }
      reducer.finish_backward();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += grads[i] != static_cast<float>(6 * (i % 101 + pass));
      CHECK(wrong == 0);
      CHECK(reducer.last_stats().buckets == 4);
      CHECK(reducer.last_stats().comm_ms > 0);
    }
  });
}

TEST_CASE("a rank that never joins fails the rendezvous with CommError after the timeout") {
  StoreServer server;
  const auto start = Clock::now();
  try {
    server.join(0, 2, "lonely/", 1500ms);
    FAIL("rendezvous with a missing rank succeeded");
  } catch (const CommError& error) {
    const std::string message = error.what();
    CHECK(message.find("rendezvous") != std::string::npos);
  }
  const auto waited = Clock::now() - start;
  CHECK(waited >= 1400ms);
  CHECK(waited < 6s);
}

TEST_CASE("the collective bench over 3 ranks finds no wrong element in any collective") {
  StoreServer server;
  on_ranks(server, 3, "bench/", [](int, GlooCommunicator& comm) {
    for (const char* collective : {"allreduce", "all_gather", "reduce_scatter", "broadcast"}) {
      CAPTURE(collective);
      dtrain::trainer::CollectiveBenchOptions options;
      options.collective = collective;
      options.sizes_bytes = {12 * 1000, 3 * 100'000 * 4};
      options.warmup_iterations = 1;
      options.iterations = 2;
      auto rows = dtrain::trainer::run_collective_bench(comm, options);
      REQUIRE(rows.size() == 2);
      for (const auto& row : rows) {
        CHECK(row.wrong == 0);
        CHECK(row.time_ms > 0);
        CHECK(row.busbw_gbps > 0);
      }
    }
  });
}

TEST_CASE("DdpReducer: a peer that leaves makes finish_backward throw CommError for the pass, then every later one") {
  StoreServer server;
  std::promise<void> left;
  auto peer = std::async(std::launch::async, [&] {
    auto comm = server.join(1, 2, "leaving/");
    std::vector<float> data(1000, 1.0f);
    comm->allreduce(data.data(), data.size())->wait();
    comm.reset();  // leaves the group: its connections close
    left.set_value();
  });
  auto comm = server.join(0, 2, "leaving/");
  std::vector<float> data(1000, 1.0f);
  comm->allreduce(data.data(), data.size())->wait();
  left.get_future().wait();
  peer.get();

  const std::size_t count = 600'000;
  std::vector<float> grads(count, 2.0f);
  DdpReducer reducer(*comm, grads.data(), count, DdpOptions{100'000 * sizeof(float), 200'000 * sizeof(float)});
  const auto start = Clock::now();
  for (int pass = 0; pass < 2; ++pass) {
    reducer.begin_backward(true);
    reducer.grads_ready(0, count);
    try {
      reducer.finish_backward();
      FAIL("finish_backward succeeded without the peer");
    } catch (const CommError& error) {
      const std::string message = error.what();
      INFO(message);
      CHECK(message.find("DDP gradient allreduce failed") != std::string::npos);
      CHECK(message.find("allreduce of 100000 floats") != std::string::npos);
    }
  }
  CHECK(Clock::now() - start < 5s);  // the closed connection fails it at once, not after the 10 s timeout
}

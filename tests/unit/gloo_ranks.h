#pragma once
// Test support: Gloo communicators for ranks that are threads of this process, meeting through a real store
// (StoreService on 127.0.0.1:0) whose namespace is `token`.

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/store/client.h"
#include "agent/store/testing/in_process_store.h"
#include "trainer/comm/gloo/communicator.h"

struct GlooRanks : dtrain::store::testing::InProcessStore {
  explicit GlooRanks(const std::string& token) : InProcessStore(token), token(token) {}

  // Rank `rank` of `size` under `prefix`; rendezvous waits at most `timeout`.
  std::unique_ptr<dtrain::trainer::GlooCommunicator> join(
      int rank, int size, const std::string& prefix,
      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto client = std::make_shared<dtrain::store::StoreClient>(
        address, token, dtrain::store::StoreClientOptions{std::chrono::seconds(5), timeout});
    dtrain::trainer::GlooCommOptions options;
    options.rank = rank;
    options.size = size;
    options.prefix = prefix;
    options.timeout = timeout;
    return std::make_unique<dtrain::trainer::GlooCommunicator>(std::move(client), options);
  }

  std::string token;
};

// Runs body(rank, comm) on `size` ranks, each a thread with its own communicator; rethrows the first failure.
inline void on_ranks(GlooRanks& ranks, int size, const std::string& prefix,
                     const std::function<void(int, dtrain::trainer::GlooCommunicator&)>& body) {
  std::vector<std::future<void>> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.push_back(std::async(std::launch::async, [&, rank] {
      auto comm = ranks.join(rank, size, prefix);
      body(rank, *comm);
    }));
  }
  for (auto& thread : threads) thread.get();
}

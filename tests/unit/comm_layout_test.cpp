// The node-layout agreement of the `auto` backend (trainer/comm/node_layout.h): ranks are threads of this process,
// each with its own client of a real store served over gRPC, and every rank must get the same verdict.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "worker/store/client.h"
#include "agent/store/testing/in_process_store.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/node_layout.h"

using dtrain::trainer::agree_node_layout;
using dtrain::trainer::CommError;
using dtrain::trainer::NodeLayout;
using dtrain::trainer::RankPlace;

namespace {

constexpr char kLayoutToken[] = "comm-layout-test-token";

// Places of a job whose node n runs sizes[n] ranks, numbered node by node, as a launcher that allows it would.
std::vector<RankPlace> places(const std::vector<int>& sizes) {
  int world = 0;
  for (int size : sizes) world += size;
  std::vector<RankPlace> out;
  for (int node = 0; node < static_cast<int>(sizes.size()); ++node) {
    for (int local = 0; local < sizes[static_cast<std::size_t>(node)]; ++local) {
      RankPlace p;
      p.rank = static_cast<int>(out.size());
      p.world = world;
      p.local_rank = local;
      p.local_world = sizes[static_cast<std::size_t>(node)];
      p.node = node;
      p.nodes = static_cast<int>(sizes.size());
      out.push_back(p);
    }
  }
  return out;
}

std::vector<NodeLayout> agree(dtrain::store::testing::InProcessStore& store, const std::vector<RankPlace>& all,
                              const std::string& prefix) {
  std::vector<std::future<NodeLayout>> ranks;
  for (const RankPlace& place : all) {
    ranks.push_back(std::async(std::launch::async, [&store, place, prefix] {
      dtrain::store::StoreClient client(store.address, store.token);
      return agree_node_layout(client, prefix, place, std::chrono::seconds(10));
    }));
  }
  std::vector<NodeLayout> out;
  for (auto& rank : ranks) out.push_back(rank.get());
  return out;
}

}  // namespace

TEST_CASE("node layout: a uniform job of 3 nodes x 2 ranks is agreed with every rank's place") {
  dtrain::store::testing::InProcessStore store(kLayoutToken);
  const std::vector<RankPlace> all = places({2, 2, 2});
  const std::vector<NodeLayout> got = agree(store, all, "uniform/");
  for (std::size_t r = 0; r < got.size(); ++r) {
    CHECK(got[r].uniform);
    CHECK(got[r].nodes == 3);
    CHECK(got[r].local_world == 2);
    CHECK(got[r].node == all[r].node);
    CHECK(got[r].local_rank == all[r].local_rank);
  }
}

TEST_CASE("node layout: nodes of 2, 1 and 3 ranks give every rank the same non-uniform verdict") {
  // World 6 over 3 nodes: node 0's 2 ranks fit N x L = W on their own; only the agreement tells them the others don't.
  dtrain::store::testing::InProcessStore store(kLayoutToken);
  const std::vector<RankPlace> all = places({2, 1, 3});
  CHECK(all[0].misfit().empty());
  CHECK(all[2].misfit().find("different numbers of ranks") != std::string::npos);
  const std::vector<NodeLayout> got = agree(store, all, "uneven/");
  for (const NodeLayout& layout : got) CHECK_FALSE(layout.uniform);
  CHECK(got[0].why.find("4 rank(s)") != std::string::npos);  // the ranks of the nodes of 1 and 3
  CHECK(got[2].why.find("rank 2:") != std::string::npos);
}

TEST_CASE("node layout: one rank whose node has no room for shared memory turns it off for every rank") {
  // One rank's own check cannot decide: its node's peers would wait for a segment it never joins.
  dtrain::store::testing::InProcessStore store(kLayoutToken);
  std::vector<RankPlace> all = places({2, 2});
  all[3].shm_shortfall = "/dev/shm has 0.9 MiB free (of 1.0 MiB); a segment of 2 ranks reserves 4.0 MiB";
  const std::vector<NodeLayout> got = agree(store, all, "no-shm/");
  for (const NodeLayout& layout : got) {
    CHECK(layout.uniform);
    CHECK_FALSE(layout.shm_room);
    CHECK(layout.shm_why == "rank 3: " + all[3].shm_shortfall);
  }

  all[3].shm_shortfall.clear();
  for (const NodeLayout& layout : agree(store, all, "shm-room/")) {
    CHECK(layout.shm_room);
    CHECK(layout.shm_why.empty());
  }
}

TEST_CASE("node layout: misfits a rank sees by itself") {
  RankPlace p = places({2, 2})[3];
  CHECK(p.misfit().empty());
  RankPlace unset = p;
  unset.local_world = 0;
  CHECK(unset.misfit().find("LOCAL_WORLD_SIZE is not set") != std::string::npos);
  RankPlace no_nodes = p;
  no_nodes.nodes = 0;
  CHECK(no_nodes.misfit().find("GROUP_WORLD_SIZE is not set") != std::string::npos);
  RankPlace shuffled = p;
  shuffled.rank = 1;  // local rank 1 of node 1 cannot be rank 1 when ranks go node by node
  CHECK(shuffled.misfit().find("not numbered node by node") != std::string::npos);
}

TEST_CASE("node layout: a rank that never arrives fails the others with a CommError that counts the arrivals") {
  dtrain::store::testing::InProcessStore store(kLayoutToken);
  std::vector<RankPlace> all = places({2, 2});
  all.pop_back();
  std::vector<std::future<std::string>> ranks;
  for (const RankPlace& place : all) {
    ranks.push_back(std::async(std::launch::async, [&store, place] {
      dtrain::store::StoreClient client(store.address, store.token);
      try {
        agree_node_layout(client, "missing/", place, std::chrono::milliseconds(500));
      } catch (const CommError& error) {
        return std::string(error.what());
      }
      return std::string("agreed");
    }));
  }
  for (auto& rank : ranks) {
    const std::string message = rank.get();
    CHECK(message.find("only 3 of WORLD_SIZE=4 arrived") != std::string::npos);
  }
}

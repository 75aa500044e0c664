// Hierarchical collectives (shm within a node, gloo across nodes) against plain gloo over the same ranks: 2 nodes x
// 2 ranks and 3 nodes x 2 ranks, each rank a thread of this process with a real shm segment per node and real gloo
// rendezvous through a real store. Values are small integers held in floats (and in bf16/fp16), so every partial sum
// is exact whatever the order of the additions, and the two backends must agree bit for bit.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/hier/communicator.h"
#include "trainer/comm/shm/communicator.h"
#include "trainer/kernels/half.h"

using dtrain::trainer::Communicator;
using dtrain::trainer::HierCommunicator;
using dtrain::trainer::ShmCommOptions;
using dtrain::trainer::ShmCommunicator;
namespace kernels = dtrain::trainer::kernels;

namespace {

constexpr char kHierToken[] = "comm-hier-test-token-round-0";

// Rank r's element i: small integers, so sums over up to 6 ranks are exact in fp32, bf16 and fp16.
float hier_value(int rank, std::size_t i) { return static_cast<float>((rank * 7 + static_cast<int>(i % 5)) % 11); }

std::unique_ptr<HierCommunicator> join_hier(GlooRanks& store, int nodes, int local, int rank, const std::string& tag) {
  ShmCommOptions shm;
  shm.rank = rank % local;
  shm.size = local;
  shm.name = "dtrain-unit-hier-" + std::to_string(::getpid()) + "-" + tag + "-node" + std::to_string(rank / local);
  shm.timeout = std::chrono::seconds(10);
  shm.geometry.arena_bytes = std::size_t{64} << 20;
  auto node = std::make_unique<ShmCommunicator>(shm);
  auto cross = store.join(rank / local, nodes, tag + "/cross" + std::to_string(rank % local) + "/");
  return std::make_unique<HierCommunicator>(std::move(node), std::move(cross));
}

std::vector<float> inputs(int rank, std::size_t count) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = hier_value(rank, i);
  return data;
}

std::vector<std::uint16_t> halves(const std::vector<float>& data, kernels::Dtype type) {
  std::vector<std::uint16_t> out(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) out[i] = kernels::half_from_float(data[i], type);
  return out;
}

// Every collective on `comm`, results appended to one vector, so two backends' runs compare as a whole.
std::vector<float> run_all(Communicator& comm, kernels::Dtype half) {
  const int rank = comm.rank();
  const int size = comm.size();
  std::vector<float> results;
  for (std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{300'001}}) {
    std::vector<float> data = inputs(rank, count);
    comm.allreduce(data.data(), count)->wait();
    results.insert(results.end(), data.begin(), data.end());
    std::vector<std::uint16_t> h = halves(inputs(rank, count), half);
    comm.allreduce_half(h.data(), count, half)->wait();
    for (std::uint16_t x : h) results.push_back(kernels::float_from_half(x, half));
  }
  for (std::size_t per : {std::size_t{1}, std::size_t{12'345}}) {
    std::vector<float> in = inputs(rank, per * size);
    std::vector<float> out(per, -1.0f);
    comm.reduce_scatter(in.data(), out.data(), per)->wait();
    results.insert(results.end(), out.begin(), out.end());
    comm.reduce_scatter(in.data(), in.data() + rank * per, per)->wait();  // in place
    results.insert(results.end(), in.begin() + rank * per, in.begin() + (rank + 1) * per);
    std::vector<std::uint16_t> hin = halves(inputs(rank, per * size), half);
    std::vector<std::uint16_t> hout(per);
    comm.reduce_scatter_half(hin.data(), hout.data(), per, half)->wait();
    for (std::uint16_t x : hout) results.push_back(kernels::float_from_half(x, half));

    std::vector<float> mine = inputs(rank, per);
    std::vector<float> gathered(per * size, -1.0f);
    comm.all_gather(mine.data(), gathered.data(), per)->wait();
    results.insert(results.end(), gathered.begin(), gathered.end());
    std::vector<std::uint16_t> hmine = halves(mine, half);
    std::vector<std::uint16_t> hgathered(per * size);
    comm.all_gather_half(hmine.data(), hgathered.data(), per)->wait();
    for (std::uint16_t x : hgathered) results.push_back(kernels::float_from_half(x, half));
  }
  for (int root = 0; root < size; ++root) {
    std::vector<float> params = inputs(rank, 5'000);
    comm.broadcast(params.data(), params.size(), root)->wait();
    results.insert(results.end(), params.begin(), params.end());
  }
  return results;
}

void compare_with_gloo(int nodes, int local, kernels::Dtype half) {
  GlooRanks store(kHierToken);
  const int size = nodes * local;
  const std::string tag = std::to_string(nodes) + "x" + std::to_string(local) + kernels::dtype_name(half);
  std::vector<std::future<std::pair<std::vector<float>, std::vector<float>>>> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      auto hier = join_hier(store, nodes, local, rank, tag);
      CHECK(hier->rank() == rank);
      CHECK(hier->size() == size);
      std::vector<float> mine = run_all(*hier, half);
      auto flat = store.join(rank, size, tag + "/flat/");
      return std::make_pair(std::move(mine), run_all(*flat, half));
    }));
  }
  for (int rank = 0; rank < size; ++rank) {
    CAPTURE(rank);
    auto [hier, gloo] = ranks[rank].get();
    REQUIRE(hier.size() == gloo.size());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < hier.size(); ++i) wrong += hier[i] != gloo[i];
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("hierarchical collectives equal plain gloo's on 2 nodes x 2 ranks (bf16) and 3 nodes x 2 ranks (fp16)") {
  compare_with_gloo(2, 2, kernels::Dtype::bf16);
  compare_with_gloo(3, 2, kernels::Dtype::fp16);
}

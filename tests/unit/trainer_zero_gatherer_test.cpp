// ZeRO-3's ParamGatherer against a communicator that records the all-gathers it is asked for: the gather order of
// a micro-step, forward and backward prefetch, at most two units besides the embeddings alive, the final LayerNorm
// kept between forward and backward, and releasing outside the owned shard.
#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "small_gpt_config.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/layout.h"
#include "trainer/parallel/zero/gatherer.h"

using namespace dtrain::trainer;

namespace {

// Rank 0 of 2; an all-gather fills the other rank's shard with 5 so that a gathered unit is visible.
class RecordingCommunicator : public Communicator {
 public:
  explicit RecordingCommunicator(const ZeroShards& shards, float* base) : shards_(shards), base_(base) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "recording"; }
  std::shared_ptr<Work> all_gather(const float* in, float* out, std::size_t count) override {
    for (int u = 0; u < shards_.num_units(); ++u)
      if (base_ + shards_.slice(u).offset == out) gathered.push_back(u);
    CHECK(in == out);
    for (std::size_t i = 0; i < count; ++i) out[count + i] = 5.0f;
    return done_work();
  }
  std::shared_ptr<Work> allreduce(float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> reduce_scatter(const float*, float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> broadcast(float*, std::size_t, int) override { throw std::logic_error("unused"); }

  std::vector<int> gathered;

 private:
  const ZeroShards& shards_;
  float* base_;
};

}  // namespace

TEST_CASE("a micro-step gathers each unit once ahead of use, with at most two units besides the embeddings") {
  auto config = small_gpt_config();
  config.num_layers = 4;
  const ParamLayout layout(config, 2);
  const ZeroShards shards(layout, 0, 2);
  std::vector<float> params(layout.buffer_size(), 1.0f);
  RecordingCommunicator comm(shards, params.data());
  ParamGatherer gatherer(comm, shards, params.data());
  gatherer.release_all();
  const int lnf = layout.num_units() - 1;
  CHECK(gatherer.order() == std::vector<int>{0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1});
  const ParamRange other{shards.slice(2).offset + shards.owned(2).count, shards.owned(2).count};
  CHECK(params[other.offset] == 0.0f);  // released: reads as zero

  for (int step = 0; step < 2; ++step) {
    comm.gathered.clear();
    gatherer.gather(0);
    CHECK(comm.gathered == std::vector<int>{0, 1});  // unit 1 prefetched
    for (int u = 1; u <= lnf; ++u) {
      gatherer.gather(u);
      CHECK(params[shards.slice(u).offset + shards.owned(u).count] == 5.0f);
      gatherer.release(u);
    }
    CHECK(comm.gathered == std::vector<int>{0, 1, 2, 3, 4, 5});  // lnf kept for backward: not gathered twice
    for (int u = lnf; u >= 1; --u) {
      gatherer.gather(u);
      gatherer.release(u);
    }
    gatherer.release(0);
    CHECK(comm.gathered == std::vector<int>{0, 1, 2, 3, 4, 5, 4, 3, 2, 1});
    CHECK(params[other.offset] == 0.0f);
    // The embeddings (unit 0) plus the two largest other units: never more.
    const std::uint64_t bound = 4 * (shards.slice(0).count + 2 * shards.slice(1).count);
    CHECK(gatherer.peak_bytes() <= bound);
    CHECK(gatherer.peak_bytes() >= 4 * (shards.slice(0).count + shards.slice(1).count));
    gatherer.reset_peak();
  }
  // Per step, ring accounting on 2 ranks (half of each unit sent): every unit in forward, the layers again in backward.
  const std::uint64_t per_step = 4 * (layout.buffer_size() / 2 + 4 * shards.slice(1).count / 2);
  CHECK(gatherer.bytes_sent() == 2 * per_step);
  CHECK_THROWS_AS(gatherer.gather(3), std::logic_error);
}

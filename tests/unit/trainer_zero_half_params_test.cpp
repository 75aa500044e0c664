// ZeRO-3 with 16-bit parameters (trainer/parallel/zero/gatherer.h, engine.h): the gatherer all-gathers the 16-bit
// working copy (half the bytes of fp32), widens the gathered unit's fp32 tensors and releases both; on one rank the
// engine's model computes exactly what a plain bf16 model computes from the same 16-bit values, and its working
// copy is refreshed from the master after a step. fp32 gathers for a 16-bit model (--param-dtype fp32) round each
// gathered unit into the working copy. Two ranks end to end: tests/parity/test_mixed_precision.py.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "small_gpt_config.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/half.h"
#include "trainer/model/gpt.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/parallel/zero/gatherer.h"

using namespace dtrain::trainer;
using kernels::Dtype;

namespace {

// Rank 0 of 2; a 16-bit all-gather fills the other rank's shard with bf16 5.0; fp32 collectives are not expected.
class HalfRecordingCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "recording"; }
  std::shared_ptr<Work> all_gather_half(const std::uint16_t* in, std::uint16_t* out, std::size_t count) override {
    CHECK(in == out);
    for (std::size_t i = 0; i < count; ++i) out[count + i] = kernels::bf16_from_float(5.0f);
    ++gathers;
    return done_work();
  }
  std::shared_ptr<Work> all_gather(const float*, float*, std::size_t) override { throw std::logic_error("fp32"); }
  std::shared_ptr<Work> allreduce(float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> reduce_scatter(const float*, float*, std::size_t) override { throw std::logic_error("unused"); }
  std::shared_ptr<Work> broadcast(float*, std::size_t, int) override { throw std::logic_error("unused"); }

  int gathers = 0;
};

std::vector<std::int32_t> half_tokens(int count, int salt) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = (i * 37 + salt * 11) % 200;
  return out;
}

}  // namespace

TEST_CASE("16-bit gathers: half the bytes, the fp32 tensors widened, both released outside the owned shard") {
  Gpt model(small_gpt_config(), kernels::cpu_backend(), 2, Dtype::bf16);
  model.init_weights(7);
  model.refresh_working_params();
  model.read_params_from_working_copy();
  const ParamLayout& layout = model.layout();
  const ZeroShards shards(layout, 0, 2);
  HalfRecordingCommunicator comm;
  HalfParams half{model.working_params(), model.compute_params(), Dtype::bf16, {}};
  for (int u = 0; u < shards.num_units(); ++u) half.widen.push_back(model.fp32_tensors(u));
  ParamGatherer gatherer(comm, shards, half);
  gatherer.release_all();

  const std::uint16_t* h = model.working_params();
  const float* wide = model.compute_params();
  const int layer = 1;  // unit 1: layer 0
  const ParamRange slice = shards.slice(layer);
  const ShardSpan& own = shards.owned(layer);
  const std::size_t other = own.offset + own.count;  // rank 1's first value
  CHECK(h[other] == 0);
  CHECK(h[own.offset] == kernels::bf16_from_float(model.params()[own.offset]));  // the owned shard is kept

  gatherer.gather(0);
  gatherer.gather(layer);
  CHECK(h[other] == kernels::bf16_from_float(5.0f));
  // fp32 tensors read the widened 16-bit values (ln1w lies in rank 0's shard, fcprojb in rank 1's); the weight
  // matrices are not widened.
  const ParamRange ln1w = layout.layer_tensor(0, LayerTensor::ln1w);
  const ParamRange fcprojb = layout.layer_tensor(0, LayerTensor::fcprojb);
  const ParamRange qkvw = layout.layer_tensor(0, LayerTensor::qkvw);
  CHECK(wide[ln1w.offset] == kernels::float_from_bf16(h[ln1w.offset]));
  CHECK(wide[fcprojb.offset + fcprojb.count - 1] == 5.0f);
  CHECK(wide[qkvw.offset] == 0.0f);
  // Unit 0 and 1 gathered, unit 2 prefetched: 16-bit slices plus the widened fp32 tensors.
  std::uint64_t expected_peak = 0;
  for (int u = 0; u <= 2; ++u) {
    expected_peak += 2 * shards.slice(u).count;
    for (const ParamRange& r : model.fp32_tensors(u)) expected_peak += 4 * r.count;
  }
  CHECK(gatherer.peak_bytes() == expected_peak);
  // Units 0, 1 and 2 issued; on 2 ranks a ring sends half of each slice, at 2 bytes a value.
  CHECK(gatherer.bytes_sent() == shards.slice(0).count + 2 * slice.count);

  gatherer.release(layer);
  CHECK(h[other] == 0);
  CHECK(wide[ln1w.offset] == 0.0f);
  CHECK(h[own.offset] == kernels::bf16_from_float(model.params()[own.offset]));
}

TEST_CASE("fp32 gathers for a 16-bit model round each gathered unit into the working copy and release it") {
  Gpt model(small_gpt_config(), kernels::cpu_backend(), 1, Dtype::fp16);
  model.init_weights(5);
  LocalCommunicator comm;
  const ZeroShards shards(model.layout(), 0, 1);
  ParamGatherer gatherer(comm, shards, model.params(), RoundedCopy{model.working_params(), Dtype::fp16});
  gatherer.release_all();
  const ParamRange slice = shards.slice(1);
  CHECK(model.working_params()[slice.offset] == 0);
  gatherer.gather(0);
  gatherer.gather(1);
  for (std::size_t i = slice.offset; i < slice.offset + slice.count; ++i)
    REQUIRE(model.working_params()[i] == kernels::fp16_from_float(model.params()[i]));
  CHECK(gatherer.peak_bytes() == 6 * (shards.slice(0).count + slice.count + shards.slice(2).count));
  gatherer.release(1);
  CHECK(model.working_params()[slice.offset] == 0);
  CHECK(model.params()[slice.offset] != 0.0f);  // one rank owns the whole unit: the master stays
}

TEST_CASE("the gatherer refuses 16-bit buffers it cannot use") {
  Gpt model(small_gpt_config(), kernels::cpu_backend(), 2, Dtype::bf16);
  const ZeroShards shards(model.layout(), 0, 2);
  HalfRecordingCommunicator comm;
  CHECK_THROWS_AS(ParamGatherer(comm, shards, HalfParams{model.working_params(), nullptr, Dtype::bf16, {}}),
                  std::invalid_argument);
  Gpt fp32(small_gpt_config(), kernels::cpu_backend(), 2);
  CHECK_THROWS_AS(fp32.read_params_from_working_copy(), std::logic_error);
  LocalCommunicator local;
  Gpt bf16(small_gpt_config(), kernels::cpu_backend(), 1, Dtype::bf16);
  CHECK_THROWS_AS(ZeroEngine(3, local, bf16, AdamWOptions{}, ZeroDtypes{Dtype::fp16}), std::invalid_argument);
}

TEST_CASE("on one rank, --zero 3 bf16 computes what a bf16 model computes from the same 16-bit parameters") {
  // Parameters that bf16 represents exactly: then the fp32 tensors a plain bf16 model reads from its master and
  // the widened ones --zero 3 reads are the same values, and so is everything computed from them.
  Gpt plain(small_gpt_config(), kernels::cpu_backend(), 1, Dtype::bf16);
  plain.init_weights(3);
  for (std::size_t i = 0; i < plain.buffer_size(); ++i)
    plain.params()[i] = kernels::float_from_bf16(kernels::bf16_from_float(plain.params()[i]));
  plain.refresh_working_params();

  LocalCommunicator comm;
  Gpt model(small_gpt_config(), plain.backend(), 1, Dtype::bf16);
  std::copy_n(plain.params(), plain.buffer_size(), model.params());
  ZeroEngine zero(3, comm, model, AdamWOptions{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f});
  zero.shard_params();
  zero.refresh_working_params();

  const auto in = half_tokens(16, 1), out = half_tokens(16, 2);
  const float expected = plain.forward(in.data(), out.data(), 2, 8);
  plain.zero_grad();
  plain.backward(1.0f, {});
  zero.zero_grad();
  CHECK(model.forward(in.data(), out.data(), 2, 8) == expected);
  zero.begin_backward(true);
  model.backward(1.0f, zero.grads_ready());
  zero.finish_backward();
  CHECK(std::equal(model.grads(), model.grads() + model.buffer_size(), plain.grads()));

  // After a step the working copy follows the master, and so does what the next gather widens.
  zero.step(1e-2f, 1);
  zero.refresh_working_params();
  const ParamRange lnfw = model.layout().lnfw();
  CHECK(model.params()[lnfw.offset] != plain.params()[lnfw.offset]);
  for (std::size_t i = 0; i < model.buffer_size(); ++i)
    REQUIRE(model.working_params()[i] == kernels::bf16_from_float(model.params()[i]));
  model.forward(in.data(), out.data(), 2, 8);
  // lnf is kept gathered between forward and backward, so its widened weight is there to read.
  CHECK(model.compute_params()[lnfw.offset] == kernels::float_from_bf16(model.working_params()[lnfw.offset]));
}

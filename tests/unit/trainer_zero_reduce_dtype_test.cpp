// ZeRO's 16-bit gradient reduction (--reduce-dtype, trainer/parallel/zero/reducer.h) over 2 real Gloo ranks
// (threads of this process, TCP between them): each rank's owned shard is the 16-bit sum of the ranks' rounded
// gradients, widened; half the bytes of fp32 are sent; over several micro-steps the reduced sums accumulate in
// fp32, each micro-step's gradient rounded once. Also ZeroEngine's sharded fp32 master at stages 1 and 2 on one rank.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "small_gpt_config.h"
#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/half.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/parallel/zero/reducer.h"
#include "trainer/parallel/zero/shards.h"

using namespace dtrain::trainer;
using kernels::Dtype;

namespace {

// Rank r's gradient for micro-step m: values over several orders of magnitude, so rounding matters everywhere.
std::vector<float> gradient(std::size_t n, int rank, int micro) {
  std::mt19937 rng(static_cast<unsigned>(1000 + 10 * rank + micro));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 6);
  std::vector<float> out(n);
  for (float& g : out) g = std::ldexp(normal(rng), exponent(rng));
  return out;
}

float rounded(float x, Dtype type) { return kernels::float_from_half(kernels::half_from_float(x, type), type); }

// The 16-bit sum of the two ranks' rounded values, as one pairwise addition in fp32 rounded back.
float half_sum(float a, float b, Dtype type) { return rounded(rounded(a, type) + rounded(b, type), type); }

// One backward pass that adds `local` into grads and reports it ready from the end, unit by unit.
void pass(ZeroReducer& reducer, const ZeroShards& shards, std::vector<float>& grads, const std::vector<float>& local,
          bool last) {
  reducer.begin_backward(true, last);
  for (int u = shards.num_units() - 1; u >= 0; --u) {
    const ParamRange slice = shards.slice(u);
    for (std::size_t i = slice.offset; i < slice.offset + slice.count; ++i) grads[i] += local[i];
    reducer.grads_ready(slice.offset, slice.count);
  }
  reducer.finish_backward();
}

}  // namespace

TEST_CASE("--reduce-dtype bf16 / fp16: the owned shard is the 16-bit sum, at half the bytes, accumulated in fp32") {
  GlooRanks ranks("zero-reduce-dtype-test-token");
  const ParamLayout layout(small_gpt_config(), 2);
  const std::size_t n = layout.buffer_size();
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    CAPTURE(kernels::dtype_name(type));
    const std::string prefix = std::string("reduce/") + kernels::dtype_name(type) + "/";
    on_ranks(ranks, 2, prefix, [&](int rank, GlooCommunicator& comm) {
      const ZeroShards shards(layout, rank, 2);
      std::vector<float> grads(n, 0.0f);
      ZeroReducer reducer(comm, shards, grads.data(), true, type);
      // One micro-step: the owned shard holds the 16-bit sum of both ranks' values.
      pass(reducer, shards, grads, gradient(n, rank, 0), true);
      const std::vector<float> g0 = gradient(n, 0, 0), g1 = gradient(n, 1, 0);
      std::size_t wrong = 0;
      for (const ShardSpan& own : shards.owned())
        for (std::size_t i = own.offset; i < own.offset + own.count; ++i)
          wrong += grads[i] != half_sum(g0[i], g1[i], type);
      CHECK(wrong == 0);
      CHECK(reducer.bytes_sent() == ring_bytes_sent(n, 2, sizeof(std::uint16_t)));

      // Two micro-steps of a stage-2 step: the reduced sums add in fp32, each micro-step rounded once.
      for (const ShardSpan& own : shards.owned()) std::fill_n(grads.data() + own.offset, own.count, 0.0f);
      pass(reducer, shards, grads, gradient(n, rank, 1), false);
      for (const ShardSpan& own : shards.owned())
        for (std::size_t i = own.offset; i < own.offset + own.count; ++i) REQUIRE(grads[i] == 0.0f);
      pass(reducer, shards, grads, gradient(n, rank, 2), true);
      const std::vector<float> a0 = gradient(n, 0, 1), a1 = gradient(n, 1, 1);
      const std::vector<float> b0 = gradient(n, 0, 2), b1 = gradient(n, 1, 2);
      wrong = 0;
      for (const ShardSpan& own : shards.owned())
        for (std::size_t i = own.offset; i < own.offset + own.count; ++i)
          wrong += grads[i] != half_sum(b0[i], b1[i], type) + half_sum(a0[i], a1[i], type);
      CHECK(wrong == 0);
    });
  }
}

TEST_CASE("an fp32 reduce-scatter of the same gradients is exact and sends twice the bytes") {
  GlooRanks ranks("zero-reduce-fp32-test-token");
  const ParamLayout layout(small_gpt_config(), 2);
  const std::size_t n = layout.buffer_size();
  on_ranks(ranks, 2, "reduce/fp32/", [&](int rank, GlooCommunicator& comm) {
    const ZeroShards shards(layout, rank, 2);
    std::vector<float> grads(n, 0.0f);
    ZeroReducer reducer(comm, shards, grads.data(), true);
    pass(reducer, shards, grads, gradient(n, rank, 0), true);
    const std::vector<float> g0 = gradient(n, 0, 0), g1 = gradient(n, 1, 0);
    std::size_t wrong = 0;
    for (const ShardSpan& own : shards.owned())
      for (std::size_t i = own.offset; i < own.offset + own.count; ++i) wrong += grads[i] != g0[i] + g1[i];
    CHECK(wrong == 0);
    CHECK(reducer.bytes_sent() == ring_bytes_sent(n, 2));
  });
}

TEST_CASE("bf16 stages 1 and 2 with the master sharded compute as stage 3 does; --param-dtype fp32 as --zero 0") {
  const AdamWOptions options{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<std::int32_t> in(16), out(16);
  for (int i = 0; i < 16; ++i) {
    in[i] = (i * 37 + 11) % 200;
    out[i] = (i * 37 + 22) % 200;
  }
  // Three optimizer steps; returns the fp32 master after them.
  const auto train = [&](int stage, std::optional<Dtype> param, std::vector<float>* losses) {
    LocalCommunicator comm;
    Gpt model(small_gpt_config(), kernels::cpu_backend(), 1, Dtype::bf16);
    model.init_weights(5);
    ZeroEngine zero(stage, comm, model, options, ZeroDtypes{param, Dtype::fp32});
    zero.shard_params();
    for (long t = 1; t <= 3; ++t) {
      zero.zero_grad();
      losses->push_back(model.forward(in.data(), out.data(), 2, 8));
      zero.begin_backward(true);
      model.backward(1.0f, zero.grads_ready());
      zero.finish_backward();
      zero.clip_grad_norm(1.0f);
      zero.step(1e-2f, t);
      zero.refresh_working_params();
    }
    return std::vector<float>(model.params(), model.params() + model.buffer_size());
  };
  std::vector<float> l3, l1, l2;
  const std::vector<float> p3 = train(3, std::nullopt, &l3);
  CHECK(train(1, std::nullopt, &l1) == p3);
  CHECK(train(2, std::nullopt, &l2) == p3);
  CHECK(l1 == l3);
  CHECK(l2 == l3);

  // --param-dtype fp32: the whole master stays, the fp32 kernels read it: a plain bf16 model with AdamW.
  std::vector<float> lf;
  const std::vector<float> pf = train(2, Dtype::fp32, &lf);
  Gpt plain(small_gpt_config(), kernels::cpu_backend(), 1, Dtype::bf16);
  plain.init_weights(5);
  plain.refresh_working_params();
  AdamW adamw(plain.backend(), plain.num_params(), plain.layout().decay_ranges(), options);
  std::vector<float> lp;
  for (long t = 1; t <= 3; ++t) {
    plain.zero_grad();
    lp.push_back(plain.forward(in.data(), out.data(), 2, 8));
    plain.backward(1.0f, {});
    clip_grad_norm(plain.backend(), plain.grads(), plain.num_params(), 1.0f);
    adamw.step(plain.params(), plain.grads(), 1e-2f, t);
    plain.refresh_working_params();
  }
  CHECK(lf == lp);
  CHECK(pf == std::vector<float>(plain.params(), plain.params() + plain.buffer_size()));
  CHECK(lf != l3);  // the fp32 kernels' tensors are rounded only with the sharded master
}

TEST_CASE("memory with a 16-bit precision: the ZeRO paper's accounting, fp32 gradients, the widened tensors") {
  const std::size_t P = 1000, F = 100;
  const auto total = [](ZeroMemory m) { return m.params + m.grads + m.optim; };
  CHECK(total(mixed_zero_memory(1, P, 4, true, F)) == 2 * P + 4 * F + 4 * P + 12 * P / 4);
  CHECK(total(mixed_zero_memory(2, P, 4, true, F)) == 2 * P + 4 * F + 4 * P / 4 + 12 * P / 4);
  CHECK(total(mixed_zero_memory(3, P, 4, true, F)) == 18 * P / 4);
  CHECK(total(mixed_zero_memory(3, P, 4, false, F)) == 18 * P / 4);
  CHECK(mixed_zero_memory(1, P, 4, false, F).optim == 4 * P + 8 * P / 4);
  CHECK(mixed_zero_memory(2, P, 4, false, F).params == 2 * P);
  CHECK_THROWS_AS(mixed_zero_memory(0, P, 4, true, F), std::invalid_argument);
}

// ZeroEngine on one rank (the local communicator) against the plain optimizer step of --zero 0: AdamW over the
// owned spans (decay ranges intersected), clipping over shards and every stage's gradient handling give the same
// parameters bit for bit. Several ranks are covered end to end by tests/parity/test_zero_parity.py.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "small_gpt_config.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/zero/engine.h"

using namespace dtrain::trainer;

namespace {

std::vector<std::int32_t> tokens(int count, int salt) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = (i * 37 + salt * 11) % 200;
  return out;
}

// Three optimizer steps of B=2, T=8, grad accum 2, clip 0.5 (tight enough to clip).
std::vector<float> train(Gpt& model, const std::function<void(float lr, long t)>& step,
                         const std::function<void(int micro)>& micro_step, const std::function<void()>& zero) {
  for (long t = 1; t <= 3; ++t) {
    zero();
    for (int micro = 0; micro < 2; ++micro) {
      const int salt = static_cast<int>(t) * 2 + micro;
      const auto in = tokens(16, salt), out = tokens(16, salt + 1);
      model.forward(in.data(), out.data(), 2, 8);
      micro_step(micro);
    }
    step(1e-2f, t);
  }
  std::vector<float> packed(model.num_params());
  model.layout().pack(model.params(), packed.data());
  return packed;
}

}  // namespace

TEST_CASE("on one rank, --zero 1, 2 and 3 update the parameters exactly as the plain AdamW step") {
  const AdamWOptions options{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  Gpt plain(small_gpt_config());
  plain.init_weights(3);
  AdamW adamw(plain.backend(), plain.num_params(), plain.layout().decay_ranges(), options);
  const std::vector<float> expected = train(
      plain,
      [&](float lr, long t) {
        clip_grad_norm(plain.backend(), plain.grads(), plain.num_params(), 0.5f);
        adamw.step(plain.params(), plain.grads(), lr, t);
      },
      [&](int) { plain.backward(0.5f, {}); }, [&] { plain.zero_grad(); });

  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    LocalCommunicator comm;
    Gpt model(small_gpt_config(), plain.backend(), 1);
    model.init_weights(3);
    ZeroEngine zero(stage, comm, model, options);
    zero.shard_params();
    const std::vector<float> got = train(
        model,
        [&](float lr, long t) {
          zero.clip_grad_norm(0.5f);
          zero.step(lr, t);
        },
        [&](int micro) {
          zero.begin_backward(micro == 1);
          model.backward(0.5f, zero.grads_ready());
          zero.finish_backward();
        },
        [&] { zero.zero_grad(); });
    CHECK(got == expected);
    CHECK(zero.memory().optim == 8 * model.buffer_size());
  }
}

TEST_CASE("AdamW::step_spans over shards with their own state equals one step over the whole buffer") {
  kernels::Backend& backend = kernels::cpu_backend();
  const ParamLayout layout(small_gpt_config(), 4);
  const std::size_t n = layout.buffer_size();
  std::vector<float> p1(n), g(n), p2;
  for (std::size_t i = 0; i < n; ++i) {
    p1[i] = 0.01f * static_cast<float>(i % 17);
    g[i] = 0.1f - 0.003f * static_cast<float>(i % 23);
  }
  p2 = p1;
  const AdamWOptions options{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  AdamW whole(backend, n, layout.decay_ranges(), options);
  // Every rank's spans, each rank with its own state, as four ZeRO ranks would do.
  std::vector<std::unique_ptr<AdamW>> ranks;
  std::vector<std::vector<ParamSpan>> spans(4);
  for (int r = 0; r < 4; ++r) {
    const ZeroShards shards(layout, r, 4);
    for (const ShardSpan& s : shards.owned()) spans[r].push_back({s.offset, s.count, s.state_offset});
    ranks.push_back(std::make_unique<AdamW>(backend, shards.shard_params(), layout.decay_ranges(), options, n));
  }
  for (long t = 1; t <= 2; ++t) {
    whole.step(p1.data(), g.data(), 1e-2f, t);
    for (int r = 0; r < 4; ++r) ranks[r]->step_spans(p2.data(), g.data(), spans[r], 1e-2f, t);
  }
  CHECK(p1 == p2);
  CHECK_THROWS_AS(ranks[0]->step(p2.data(), g.data(), 1e-2f, 3), std::logic_error);
}

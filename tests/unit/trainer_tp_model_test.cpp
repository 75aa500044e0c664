// Gpt split over a tensor-parallel group (trainer/model/gpt.h): T = 2 and T = 4 Gloo ranks (threads of this
// process) each build their slices of a small GPT (L = 2, C = 16, 4 heads, V = 250 of Vp = 256, so the last
// vocabulary slice holds padding), initialised from the whole model's initialisation, and run one forward and
// backward on the same batch. Against the whole model (T = 1) on the CPU backend: every rank's parameters are its
// slices of the whole model's, bit for bit; every rank's loss is the whole model's (1e-6 relative); the ranks'
// gradients, put back together, are the whole model's gradient, tensor by tensor, within 1e-5 relative L2; and the
// replicated tensors (wpe, the LayerNorms, the row-parallel biases) get the same gradient on every rank, bit for bit.
// With recompute full and selective too (the same gradients), and with sequence parallelism (the residual stream split
// by tokens: LayerNorm gradients summed over the group, so the replicated tensors stay equal bit for bit). And the
// refusals: a TP model on a device backend, a
// communicator of the wrong group, a forward without one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/unit/relative_l2.h"
#include "tests/unit/gloo_ranks.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/kernels/standin/backend.h"
#include "trainer/model/gpt.h"

using namespace dtrain::trainer;

namespace trainer_tp_model_test {

constexpr int B = 2, T = 6;

GptConfig config() {
  GptConfig c;
  c.max_seq_len = 8;
  c.vocab_size = 250;
  c.padded_vocab_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.channels = 16;
  return c;
}

std::vector<std::int32_t> batch() {  // B*T + 1 ids: inputs [0, B*T), targets [1, B*T + 1)
  std::vector<std::int32_t> ids(B * T + 1);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 83 + 7) % 250);
  ids[3] = 249;  // the last real id, in the last slice
  return ids;
}

// A whole-model buffer (ours) in llm.c's checkpoint order.
std::vector<float> ordered(const ParamLayout& layout, const float* ours) {
  std::vector<float> out(layout.num_params());
  layout.to_checkpoint_order(ours, out.data());
  return out;
}

struct Result {
  float loss = 0;
  std::vector<float> params, grads;  // whole model, checkpoint order
};

Result whole_model(Recompute recompute) {
  Gpt model(config());
  model.set_recompute(recompute);
  model.init_weights(5);
  const std::vector<std::int32_t> ids = batch();
  Result r;
  model.zero_grad();
  r.loss = model.forward(ids.data(), ids.data() + 1, B, T);
  model.backward(1.0f, {});
  r.params = ordered(model.layout(), model.params());
  r.grads = ordered(model.layout(), model.grads());
  return r;
}

void check_split(int size, Recompute recompute, bool sequence = false) {
  CAPTURE(size);
  CAPTURE(sequence);
  CAPTURE(recompute_name(recompute));
  const Result whole = whole_model(recompute);
  const ParamLayout whole_layout(config());
  std::vector<std::vector<float>> rank_grads(size);  // each rank's slices in a whole-model buffer (checkpoint order)
  std::vector<float> losses(size);
  std::vector<int> same_params(size);
  GlooRanks ranks("tp-model-" + std::to_string(size) + recompute_name(recompute) + (sequence ? "-sp" : ""));
  on_ranks(ranks, size, "tp", [&](int rank, GlooCommunicator& comm) {
    Gpt model(config(), kernels::cpu_backend(), 1, kernels::Dtype::fp32, nullptr,
              TensorParallel{size, rank, sequence});
    model.set_tensor_parallel_group(&comm);
    model.set_recompute(recompute);
    model.init_weights(5);
    std::vector<float> expected(model.buffer_size());
    model.layout().take_slices(whole.params.data(), expected.data());
    same_params[rank] = std::vector<float>(model.params(), model.params() + model.buffer_size()) == expected;
    const std::vector<std::int32_t> ids = batch();
    model.zero_grad();
    losses[rank] = model.forward(ids.data(), ids.data() + 1, B, T);
    model.backward(1.0f, {});
    rank_grads[rank].assign(whole_layout.num_params(), 0.0f);
    model.layout().put_slices(model.grads(), rank_grads[rank].data());
  });
  std::vector<float> grads(whole_layout.num_params());
  for (int r = 0; r < size; ++r) {
    CAPTURE(r);
    CHECK(same_params[r]);
    CHECK(std::abs(losses[r] - whole.loss) <= 1e-6 * std::abs(whole.loss));
    const ParamLayout local(config(), 1, TensorParallel{size, r});
    for (const TensorInfo& t : local.checkpoint_tensors()) {
      if (t.replicated) {  // the same bits on every rank
        CAPTURE(t.name);
        CHECK(std::equal(rank_grads[r].begin() + t.full_at, rank_grads[r].begin() + t.full_at + t.count,
                         rank_grads[0].begin() + t.full_at));
      }
      for (const SlicePiece& piece : t.pieces)  // this rank's part of the whole gradient
        std::copy_n(rank_grads[r].begin() + t.full_at + piece.full, piece.count,
                    grads.begin() + t.full_at + piece.full);
    }
  }
  for (const TensorInfo& t : whole_layout.checkpoint_tensors()) {
    CAPTURE(t.name);
    CAPTURE(t.layer);
    CHECK(relative_l2(grads.data() + t.full_at, whole.grads.data() + t.full_at, t.count) <= 1e-5);
  }
}

TEST_CASE("a tensor-parallel GPT computes the whole model's loss and gradients") {
  check_split(2, Recompute::none);
  check_split(4, Recompute::none);
  check_split(2, Recompute::full);
  check_split(4, Recompute::selective);
}

TEST_CASE("a sequence-parallel GPT computes the whole model's loss and gradients") {
  check_split(2, Recompute::none, true);
  check_split(4, Recompute::none, true);
  check_split(2, Recompute::full, true);
  check_split(4, Recompute::selective, true);
}

TEST_CASE("a tensor-parallel GPT refuses what it cannot run") {
  const TensorParallel two{2, 0};
  CHECK_THROWS_AS(Gpt(config(), kernels::standin_backend(), 1, kernels::Dtype::fp32, nullptr, two),
                  std::invalid_argument);
  GlooRanks ranks("tp-model-refusals");
  on_ranks(ranks, 2, "tp", [&](int rank, GlooCommunicator& comm) {
    Gpt wrong(config(), kernels::cpu_backend(), 1, kernels::Dtype::fp32, nullptr, TensorParallel{2, 1 - rank});
    CHECK_THROWS_AS(wrong.set_tensor_parallel_group(&comm), std::invalid_argument);
    float done = 1;
    comm.allreduce(&done, 1)->wait();  // neither rank leaves while the other is still connecting
  });
  Gpt alone(config(), kernels::cpu_backend(), 1, kernels::Dtype::fp32, nullptr, two);
  alone.init_weights(1);
  const std::vector<std::int32_t> ids = batch();
  CHECK_THROWS_AS(alone.forward(ids.data(), ids.data() + 1, B, T), std::logic_error);
}

}  // namespace trainer_tp_model_test

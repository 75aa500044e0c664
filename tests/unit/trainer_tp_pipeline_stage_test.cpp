// Gpt as a pipeline stage (trainer/model/gpt.h): a small GPT (L = 4) split into P = 2 and P = 4 stages in one thread,
// the stages handing their outputs and input gradients on by copies, K = 3 micro-batches in flight (one activation set
// each, all forwards before the backwards, as GPipe runs them), and P = 2 with 2 virtual stages each (chunks of one
// layer, stage 0 holding layers 0 and 2), against the whole model accumulating the same K
// micro-batches. Every stage holds its slices of the whole model's initialisation; the last stage's loss is the
// whole model's (1e-6 relative) and the others write 0; every gradient, put back together (the two wte copies
// summed), is the whole model's within 1e-6 relative L2. With recompute full and selective too. And the layout: empty
// units of other stages, the tied copy, out-of-range layers and layers that do not divide.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/model/gpt.h"
#include "tests/unit/relative_l2.h"

using namespace dtrain::trainer;

namespace trainer_pipeline_stage_test {

constexpr int B = 2, T = 6, K = 3;

GptConfig config() {
  GptConfig c;
  c.max_seq_len = 8;
  c.vocab_size = 250;
  c.padded_vocab_size = 256;
  c.num_layers = 4;
  c.num_heads = 2;
  c.channels = 16;
  return c;
}

std::vector<std::int32_t> batch(int micro) {  // B*T + 1 ids: inputs [0, B*T), targets [1, B*T + 1)
  std::vector<std::int32_t> ids(B * T + 1);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 83 + 7 + micro * 31) % 250);
  return ids;
}

struct Result {
  std::vector<float> losses;
  std::vector<float> params, grads;  // whole model, checkpoint order
};

Result whole_model(Recompute recompute) {
  Gpt model(config());
  model.set_recompute(recompute);
  model.init_weights(5);
  Result r;
  model.zero_grad();
  for (int m = 0; m < K; ++m) {
    const std::vector<std::int32_t> ids = batch(m);
    r.losses.push_back(model.forward(ids.data(), ids.data() + 1, B, T));
    model.backward(1.0f / K, {});
  }
  r.params.resize(model.num_params());
  r.grads.resize(model.num_params());
  model.layout().to_checkpoint_order(model.params(), r.params.data());
  model.layout().to_checkpoint_order(model.grads(), r.grads.data());
  return r;
}

void check_pipeline(int P, Recompute recompute, int V = 1) {
  CAPTURE(P);
  CAPTURE(V);
  CAPTURE(recompute_name(recompute));
  const Result whole = whole_model(recompute);
  const std::size_t BTC = static_cast<std::size_t>(B) * T * config().channels;
  std::vector<std::unique_ptr<Gpt>> stages;
  for (int s = 0; s < P; ++s) {
    stages.push_back(std::make_unique<Gpt>(config(), kernels::cpu_backend(), 1, kernels::Dtype::fp32, nullptr,
                                           TensorParallel{}, PipelineStage{P, s, V}));
    Gpt& model = *stages.back();
    model.set_recompute(recompute);
    model.set_activation_sets(K * V);
    model.init_weights(5);
    std::vector<float> expected(model.buffer_size());
    model.layout().take_slices(whole.params.data(), expected.data());
    CHECK(std::vector<float>(model.params(), model.params() + model.buffer_size()) == expected);
    model.zero_grad();
  }
  // Global chunk g (of P x V) is chunk g / P of stage g % P; micro-batch m's activations of chunk v in set m V + v.
  auto use = [&](int g, int m) -> Gpt& {
    Gpt& model = *stages[g % P];
    model.use_activation_set(m * V + g / P, g / P);
    return model;
  };
  for (int m = 0; m < K; ++m) {
    const std::vector<std::int32_t> ids = batch(m);
    for (int g = 0; g < P * V; ++g) {
      Gpt& model = use(g, m);
      if (g > 0) {
        const float* before = use(g - 1, m).stage_output();
        std::memcpy(model.stage_input(B, T), before, BTC * sizeof(float));
        use(g, m);
      }
      const float loss = model.forward(ids.data(), ids.data() + 1, B, T);
      CHECK(std::abs(loss - (g == P * V - 1 ? whole.losses[m] : 0.0f)) <= 1e-6 * std::abs(whole.losses[m]));
    }
  }
  for (int m = 0; m < K; ++m)
    for (int g = P * V - 1; g >= 0; --g) {
      if (g < P * V - 1) {
        const float* after = use(g + 1, m).stage_input_grad();
        std::memcpy(use(g, m).stage_output_grad(), after, BTC * sizeof(float));
      }
      use(g, m).backward(1.0f / K, {});
    }
  // The stages' gradients put together; the tied copy of wte (last stage) added to the first stage's.
  std::vector<float> grads(whole.grads.size(), 0.0f), tied(whole.grads.size(), 0.0f);
  for (int s = 0; s < P; ++s) {
    std::vector<float> mine(whole.grads.size(), 0.0f);
    stages[s]->layout().put_slices(stages[s]->grads(), mine.data());
    for (const TensorInfo& t : stages[s]->layout().checkpoint_tensors())
      for (std::size_t i = t.full_at; i < t.full_at + t.count; ++i) (t.tied_copy ? tied[i] : grads[i]) += mine[i];
  }
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] += tied[i];
  CHECK(relative_l2(grads.data(), whole.grads.data(), grads.size()) <= 1e-6);
}

TEST_CASE("pipeline stages: losses and gradients of the whole model, P = 2 and 4, and 2 x 2 virtual stages") {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    check_pipeline(2, r);
    check_pipeline(4, r);
    check_pipeline(2, r, 2);
  }
}

TEST_CASE("pipeline stage layout: its tensors only, the whole model's numbering") {
  const GptConfig c = config();
  const ParamLayout whole(c);
  const ParamLayout first(c, 1, {}, PipelineStage{2, 0}), last(c, 1, {}, PipelineStage{2, 1});
  const ParamLayout middle(c, 1, {}, PipelineStage{4, 1});
  CHECK(first.num_params() + last.num_params() == whole.num_params() + whole.wte().count);
  CHECK(first.first_layer() == 0);
  CHECK(last.first_layer() == 2);
  CHECK(middle.stage_layers() == 1);
  CHECK(middle.wte().count == 0);
  CHECK(middle.wpe().count == 0);
  CHECK(middle.lnfw().count == 0);
  CHECK(last.wpe().count == 0);
  CHECK(last.wte().count == whole.wte().count);
  CHECK(first.lnfw().count == 0);
  CHECK(middle.unit_slice(1).count == 0);   // layer 0: another stage's
  CHECK(middle.unit_slice(2).count == middle.layer(1).count);
  CHECK(middle.unit_params(0) == 0);
  CHECK_THROWS_AS(middle.layer(0), std::out_of_range);
  bool tied = false;
  for (const TensorInfo& t : last.checkpoint_tensors()) tied = tied || (t.name == "wte" && t.tied_copy);
  CHECK(tied);
  for (const TensorInfo& t : first.checkpoint_tensors()) CHECK_FALSE(t.tied_copy);
  CHECK_THROWS_WITH_AS(ParamLayout(c, 1, {}, PipelineStage{3, 0}),
                       doctest::Contains("4 layers must divide by the pipeline-parallel size 3"),
                       std::invalid_argument);
  Gpt model(c, kernels::cpu_backend(), 1, kernels::Dtype::fp32, nullptr, {}, PipelineStage{2, 1});
  CHECK_THROWS_AS(model.use_activation_set(1), std::out_of_range);
  CHECK_THROWS_AS(model.stage_output(), std::logic_error);
  CHECK_THROWS_AS(model.set_activation_sets(0), std::invalid_argument);
  const ParamLayout chunked(c, 1, {}, PipelineStage{2, 0, 2});
  CHECK(chunked.has_layer(0));
  CHECK_FALSE(chunked.has_layer(1));
  CHECK(chunked.has_layer(2));
  CHECK(chunked.chunk_first_layer(1) == 2);
  CHECK(chunked.layer(2).offset == chunked.layer(0).offset + chunked.layer(0).count);
  CHECK(chunked.unit_slice(2).count == 0);  // layer 1, stage 1's
  CHECK_THROWS_WITH_AS(ParamLayout(c, 1, {}, PipelineStage{4, 0, 2}), doctest::Contains("4 x 2 virtual stages"),
                       std::invalid_argument);
}

}  // namespace trainer_pipeline_stage_test

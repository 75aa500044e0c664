// The GPT model: config checks, the parameter layout contract (in-memory order, llm.c checkpoint order, decay
// ranges), initialisation, the whole backward against finite differences, accumulation, and the grads_ready
// contract that DDP relies on.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/model/gpt.h"

using namespace dtrain::trainer;

namespace {

// L=2, C=8, NH=2, maxT=6, V=10 (padded to 16): small enough to difference every parameter.
GptConfig micro() { return GptConfig{6, 10, 16, 2, 2, 8}; }

void randomise(Gpt& model, std::uint32_t seed) {
  model.init_weights(seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  for (std::size_t i = 0; i < model.num_params(); ++i) model.params()[i] += dist(rng);
}

struct Batch {
  int B = 2, T = 5;
  std::vector<std::int32_t> inputs, targets;
};

Batch random_batch(int B, int T, int V, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b{B, T, {}, {}};
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back(static_cast<std::int32_t>(rng() % V));
    b.targets.push_back(static_cast<std::int32_t>(rng() % V));
  }
  return b;
}

}  // namespace

TEST_CASE("presets and validation") {
  const GptConfig tiny = GptConfig::preset("tiny");
  CHECK(tiny.num_layers == 2);
  CHECK(tiny.channels == 64);
  const GptConfig gpt2 = GptConfig::preset("gpt2-124m");
  CHECK(gpt2.padded_vocab_size == 50304);
  CHECK(GptConfig::pad_vocab(50257) == 50304);
  CHECK(GptConfig::pad_vocab(256) == 256);
  CHECK_THROWS_WITH_AS(GptConfig::preset("huge"), doctest::Contains("known presets: tiny, gpt2-124m"),
                       std::invalid_argument);
  GptConfig bad = tiny;
  bad.num_heads = 5;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("not a multiple of num_heads 5"), std::invalid_argument);
  bad = tiny;
  bad.padded_vocab_size = 100;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("smaller than vocab_size"), std::invalid_argument);
  bad = tiny;
  bad.num_layers = 0;
  CHECK_THROWS_AS(Gpt{bad}, std::invalid_argument);
}

TEST_CASE("layout: GPT-2 124M has llm.c's parameter count; tensors in llm.c order tile the buffer") {
  CHECK(ParamLayout(GptConfig::preset("gpt2-124m")).num_params() == 124'475'904);

  const ParamLayout layout(micro());
  const auto& tensors = layout.checkpoint_tensors();
  const int L = micro().num_layers;
  REQUIRE(tensors.size() == static_cast<std::size_t>(4 + 12 * L));
  CHECK(tensors[0].name == "wte");
  CHECK(tensors[1].name == "wpe");
  CHECK(tensors[2].name == "ln1w");
  CHECK(tensors[2].layer == 0);
  CHECK(tensors[3].layer == 1);
  CHECK(tensors[2 + 2 * L].name == "qkvw");
  CHECK(tensors.back().name == "lnfb");

  // Every element belongs to exactly one tensor.
  std::vector<int> covered(layout.num_params(), 0);
  for (const auto& t : tensors) {
    std::size_t count = 1;
    for (int d : t.shape) count *= static_cast<std::size_t>(d);
    CHECK(count == t.count);
    for (std::size_t i = 0; i < t.count; ++i) covered[t.offset + i] += 1;
  }
  CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));

  // In memory: wte, wpe, then layer 0 whole, ..., final LayerNorm last.
  CHECK(layout.wpe().offset == layout.wte().count);
  CHECK(layout.layer(0).offset == layout.wte().count + layout.wpe().count);
  CHECK(layout.layer(1).offset == layout.layer(0).offset + layout.layer(0).count);
  CHECK(layout.lnfw().offset == layout.layer(1).offset + layout.layer(1).count);
  CHECK(layout.layer_tensor(1, LayerTensor::fcprojb).offset + layout.layer_tensor(1, LayerTensor::fcprojb).count ==
        layout.lnfw().offset);

  // Conversion: value = our offset; in checkpoint order the third tensor (ln1w of layer 0) follows wte and wpe.
  std::vector<float> ours(layout.num_params()), ckpt(layout.num_params()), back(layout.num_params());
  std::iota(ours.begin(), ours.end(), 0.0f);
  layout.to_checkpoint_order(ours.data(), ckpt.data());
  const std::size_t ln1w0 = layout.layer_tensor(0, LayerTensor::ln1w).offset;
  const std::size_t ln1w1 = layout.layer_tensor(1, LayerTensor::ln1w).offset;
  const std::size_t at = layout.wte().count + layout.wpe().count;
  CHECK(ckpt[at] == static_cast<float>(ln1w0));
  CHECK(ckpt[at + micro().channels] == static_cast<float>(ln1w1));
  layout.from_checkpoint_order(ckpt.data(), back.data());
  CHECK(back == ours);
}

TEST_CASE("decay ranges: exactly the 2-D tensors") {
  const ParamLayout layout(micro());
  std::vector<bool> decays(layout.num_params(), false);
  for (const ParamRange& r : layout.decay_ranges())
    for (std::size_t i = 0; i < r.count; ++i) decays[r.offset + i] = true;
  for (const auto& t : layout.checkpoint_tensors()) {
    INFO(t.name << "[" << t.layer << "]");
    const bool two_d = t.shape.size() == 2;
    CHECK(t.decay == two_d);
    CHECK(std::all_of(decays.begin() + t.offset, decays.begin() + t.offset + t.count,
                      [&](bool d) { return d == two_d; }));
  }
}

TEST_CASE("init_weights: nanoGPT's scheme, deterministic per seed") {
  const GptConfig config{64, 250, 256, 2, 4, 64};
  Gpt a(config), b(config);
  a.init_weights(42);
  b.init_weights(42);
  CHECK(std::equal(a.params(), a.params() + a.num_params(), b.params()));
  b.init_weights(43);
  CHECK_FALSE(std::equal(a.params(), a.params() + a.num_params(), b.params()));

  auto stddev = [&](ParamRange r) {
    double s = 0, s2 = 0;
    for (std::size_t i = 0; i < r.count; ++i) {
      s += a.params()[r.offset + i];
      s2 += static_cast<double>(a.params()[r.offset + i]) * a.params()[r.offset + i];
    }
    const double m = s / r.count;
    return std::sqrt(s2 / r.count - m * m);
  };
  const ParamLayout& l = a.layout();
  CHECK(stddev(l.layer_tensor(0, LayerTensor::qkvw)) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(l.layer_tensor(1, LayerTensor::fcprojw)) == doctest::Approx(0.02 / std::sqrt(4.0)).epsilon(0.05));
  CHECK(stddev(l.wpe()) == doctest::Approx(0.02).epsilon(0.05));
  for (std::size_t i = 0; i < l.layer_tensor(0, LayerTensor::ln2w).count; ++i) {
    CHECK(a.params()[l.layer_tensor(0, LayerTensor::ln2w).offset + i] == 1.0f);
    CHECK(a.params()[l.layer_tensor(0, LayerTensor::qkvb).offset + i] == 0.0f);
  }
  // Padded vocabulary rows are zero.
  const std::size_t C = config.channels;
  CHECK(std::all_of(a.params() + config.vocab_size * C, a.params() + config.padded_vocab_size * C,
                    [](float x) { return x == 0.0f; }));
}

TEST_CASE("forward rejects bad shapes and tokens, names the position") {
  Gpt model(micro());
  model.init_weights(1);
  Batch b = random_batch(2, 5, 10, 3);
  CHECK_THROWS_AS(model.forward(b.inputs.data(), b.targets.data(), 1, 7), std::invalid_argument);  // T > maxT
  b.inputs[6] = 10;  // == V
  CHECK_THROWS_WITH_AS(model.forward(b.inputs.data(), b.targets.data(), 2, 5),
                       doctest::Contains("batch row 1, position 1"), std::invalid_argument);
  b.inputs[6] = 3;
  const float logits_only = model.forward(b.inputs.data(), nullptr, 2, 5);
  CHECK(std::isnan(logits_only));
  CHECK_THROWS_AS(model.backward(1.0f, {}), std::logic_error);
}

TEST_CASE("backward: every parameter's gradient matches finite differences of the loss") {
  Gpt model(micro());
  randomise(model, 7);
  const Batch b = random_batch(2, 5, 10, 8);
  model.zero_grad();
  model.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
  model.backward(1.0f, {});
  const std::vector<float> analytic(model.grads(), model.grads() + model.num_params());

  const float h = 1e-2f;
  for (const TensorInfo& t : model.layout().checkpoint_tensors()) {
    double max_abs = 1e-6, worst = 0.0;
    for (std::size_t i = 0; i < t.count; ++i) max_abs = std::max(max_abs, std::abs(double(analytic[t.offset + i])));
    for (std::size_t i = 0; i < t.count; ++i) {
      float& p = model.params()[t.offset + i];
      const float saved = p;
      p = saved + h;
      const double plus = model.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
      p = saved - h;
      const double minus = model.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
      p = saved;
      worst = std::max(worst, std::abs((plus - minus) / (2 * h) - analytic[t.offset + i]) / max_abs);
    }
    INFO(t.name << "[" << t.layer << "]: max |grad| " << max_abs << ", worst relative error " << worst);
    CHECK(worst < 2e-2);
  }
}

TEST_CASE("backward accumulates d(loss_scale * loss) into the gradients") {
  Gpt model(micro());
  randomise(model, 9);
  const Batch b = random_batch(2, 5, 10, 10);
  model.zero_grad();
  model.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
  model.backward(1.0f, {});
  const std::vector<float> once(model.grads(), model.grads() + model.num_params());
  model.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
  model.backward(0.5f, {});
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < once.size(); ++i)
    wrong += std::abs(model.grads()[i] - 1.5f * once[i]) > 1e-5f * (1.0f + std::abs(once[i]));
  CHECK(wrong == 0);
  CHECK_THROWS_AS(model.backward(1.0f, {}), std::logic_error);  // needs a new forward
  model.zero_grad();
  CHECK(std::all_of(model.grads(), model.grads() + model.num_params(), [](float g) { return g == 0.0f; }));
}

TEST_CASE("grads_ready: decreasing contiguous ranges covering the buffer once, each final when reported") {
  Gpt model(GptConfig{6, 10, 16, 3, 2, 8});
  randomise(model, 11);
  const Batch b = random_batch(2, 5, 10, 12);
  for (int pass = 0; pass < 2; ++pass) {  // the second pass accumulates: ranges must still be final
    model.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    std::vector<std::vector<float>> snapshots;
    model.backward(1.0f, [&](std::size_t offset, std::size_t count) {
      ranges.emplace_back(offset, count);
      snapshots.emplace_back(model.grads() + offset, model.grads() + offset + count);
    });
    REQUIRE(!ranges.empty());
    std::size_t end = model.num_params();
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      CHECK(ranges[i].second > 0);
      CHECK(ranges[i].first + ranges[i].second == end);
      end = ranges[i].first;
      CHECK(std::equal(snapshots[i].begin(), snapshots[i].end(), model.grads() + ranges[i].first));
    }
    CHECK(end == 0);
    // Finer than per layer: the final LayerNorm first, then several ranges per block.
    CHECK(ranges.front().first == model.layout().lnfw().offset);
    CHECK(ranges.size() > static_cast<std::size_t>(model.config().num_layers) + 2);
  }
}

TEST_CASE("changing B and T between passes reuses or grows the activations without changing results") {
  Gpt model(micro()), fresh(micro());
  randomise(model, 13);
  randomise(fresh, 13);
  const Batch big = random_batch(2, 5, 10, 14), small = random_batch(1, 3, 10, 15), tall = random_batch(1, 6, 10, 16);
  const float expected = fresh.forward(big.inputs.data(), big.targets.data(), 2, 5);
  fresh.zero_grad();
  fresh.backward(1.0f, {});
  model.forward(small.inputs.data(), small.targets.data(), 1, 3);      // smaller first, then grow
  model.forward(tall.inputs.data(), tall.targets.data(), 1, 6);        // B*T fits, B*T*T grows
  model.forward(small.inputs.data(), small.targets.data(), 1, 3);
  CHECK(model.forward(big.inputs.data(), big.targets.data(), 2, 5) == expected);
  model.zero_grad();
  model.backward(1.0f, {});
  CHECK(std::equal(model.grads(), model.grads() + model.num_params(), fresh.grads()));
}

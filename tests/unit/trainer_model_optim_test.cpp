// AdamW over the flat buffer (decay on 2-D tensors only), global-norm clipping, and the learning-rate schedule.

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"

using namespace dtrain::trainer;

TEST_CASE("AdamW decays only the 2-D tensors and moves every parameter with a gradient") {
  Gpt model(GptConfig{6, 10, 16, 2, 2, 8});
  model.init_weights(3);
  const std::vector<float> before(model.params(), model.params() + model.num_params());
  AdamWOptions options;
  options.weight_decay = 0.5f;
  AdamW adamw(model.backend(), model.num_params(), model.layout().decay_ranges(), options);
  model.zero_grad();  // no gradient: only decay moves anything
  adamw.step(model.params(), model.grads(), 0.1f, 1);
  for (const TensorInfo& t : model.layout().checkpoint_tensors()) {
    INFO(t.name << "[" << t.layer << "]");
    const float factor = t.decay ? 1.0f - 0.1f * 0.5f : 1.0f;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < t.count; ++i)
      wrong += std::abs(model.params()[t.offset + i] - before[t.offset + i] * factor) > 1e-7f;
    CHECK(wrong == 0);
  }
  // First step with a gradient: bias-corrected m / sqrt(v) is sign(g), so each parameter moves by lr.
  for (std::size_t i = 0; i < model.num_params(); ++i) model.grads()[i] = (i % 2 ? 1e-3f : -2.0f);
  AdamWOptions plain;
  plain.weight_decay = 0.0f;
  AdamW fresh(model.backend(), model.num_params(), {}, plain);
  const std::vector<float> start(model.params(), model.params() + model.num_params());
  fresh.step(model.params(), model.grads(), 0.01f, 1);
  CHECK(model.params()[0] - start[0] == doctest::Approx(0.01f).epsilon(1e-4));
  CHECK(model.params()[1] - start[1] == doctest::Approx(-0.01f).epsilon(1e-3));
  CHECK(fresh.m()[0] == doctest::Approx(-0.2f));
  CHECK(fresh.v()[0] == doctest::Approx(0.05f * 4.0f));
  CHECK_THROWS_AS(fresh.step(model.params(), model.grads(), 0.01f, 0), std::invalid_argument);
  CHECK_THROWS_AS(AdamW(model.backend(), 10, {{5, 10}}, plain), std::invalid_argument);
}

TEST_CASE("clip_grad_norm: torch semantics") {
  auto& k = kernels::cpu_backend();
  std::vector<float> g{3.0f, 4.0f};
  CHECK(clip_grad_norm(k, g.data(), g.size(), 0.0f) == doctest::Approx(5.0f));  // measure only
  CHECK(g[0] == 3.0f);
  CHECK(clip_grad_norm(k, g.data(), g.size(), 10.0f) == doctest::Approx(5.0f));  // under the limit: untouched
  CHECK(g[1] == 4.0f);
  CHECK(clip_grad_norm(k, g.data(), g.size(), 1.0f) == doctest::Approx(5.0f));
  CHECK(g[0] == doctest::Approx(3.0f / (5.0f + 1e-6f)));
  CHECK(std::hypot(g[0], g[1]) == doctest::Approx(1.0f).epsilon(1e-5));
}

TEST_CASE("learning-rate schedule: linear warmup, then constant or cosine to the floor") {
  LrSchedule s;
  s.lr = 1.0f;
  s.warmup_steps = 4;
  s.total_steps = 14;
  CHECK(s.at(0) == doctest::Approx(0.25f));
  CHECK(s.at(3) == doctest::Approx(1.0f));
  CHECK(s.at(10) == doctest::Approx(1.0f));
  s.kind = LrSchedule::Kind::cosine;
  s.min_lr_ratio = 0.1f;
  CHECK(s.at(4) == doctest::Approx(1.0f));
  CHECK(s.at(9) == doctest::Approx(0.1f + 0.5f * 0.9f));
  CHECK(s.at(14) == doctest::Approx(0.1f));
  CHECK(s.at(100) == doctest::Approx(0.1f));
  CHECK(LrSchedule::parse_kind("cosine") == LrSchedule::Kind::cosine);
  CHECK_THROWS_WITH(LrSchedule::parse_kind("linear"), doctest::Contains("use constant or cosine"));
}

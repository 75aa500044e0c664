// LossScaler against torch.cuda.amp.GradScaler's rule, written out here from its source (Debian's CPU-only torch
// disables GradScaler and has no CPU kernel for _amp_update_scale_, so it cannot be called):
//   GradScaler(init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)
//   unscale_: inv_scale = scale.double().reciprocal().float(); found_inf = any(!isfinite(g)); g *= inv_scale
//   step:     skipped when found_inf (optimizer.step() is not called)
//   update (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp, _amp_update_scale_cpu_kernel):
//     if found_inf: scale *= backoff_factor; growth_tracker = 0
//     else: successful = growth_tracker + 1
//           if successful == growth_interval: new_scale = scale * growth_factor
//                                             if isfinite(new_scale): scale = new_scale
//                                             growth_tracker = 0
//           else: growth_tracker = successful
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainer/kernels/cpu/backend.h"
#include "trainer/optim/loss_scaler.h"

using dtrain::trainer::LossScaler;
using dtrain::trainer::LossScalerOptions;
using dtrain::trainer::kernels::cpu_backend;

namespace {

// The rule above, transcribed: one step's (scale used for the step, skipped).
struct GradScalerRule {
  float scale;
  float growth_factor, backoff_factor;
  int growth_interval;
  int growth_tracker = 0;

  std::pair<float, bool> step(bool found_inf) {
    const std::pair<float, bool> used{scale, found_inf};
    if (found_inf) {
      scale *= backoff_factor;
      growth_tracker = 0;
    } else {
      const int successful = growth_tracker + 1;
      if (successful == growth_interval) {
        const float new_scale = scale * growth_factor;
        if (std::isfinite(new_scale)) scale = new_scale;
        growth_tracker = 0;
      } else {
        growth_tracker = successful;
      }
    }
    return used;
  }
};

// Runs `steps` steps whose gradients overflow where overflow(step) says: the gradient is the scaled value 1 * scale
// (inf injected on overflowing steps); returns each step's (scale, skipped).
template <typename Overflow>
std::vector<std::pair<float, bool>> run_scaler(LossScaler& scaler, int steps, Overflow overflow) {
  std::vector<std::pair<float, bool>> out;
  std::vector<float> grads(40000);
  for (int step = 0; step < steps; ++step) {
    const float scale = scaler.scale();
    for (float& g : grads) g = 1.0f * scale;
    if (overflow(step)) grads[static_cast<std::size_t>(step) * 7919 % grads.size()] = INFINITY;
    scaler.unscale(grads.data(), grads.size());
    if (!overflow(step)) CHECK(grads[123] == 1.0f);
    out.emplace_back(scale, scaler.update(scaler.found_inf()));
  }
  return out;
}

template <typename Overflow>
std::vector<std::pair<float, bool>> run_rule(GradScalerRule rule, int steps, Overflow overflow) {
  std::vector<std::pair<float, bool>> out;
  for (int step = 0; step < steps; ++step) out.push_back(rule.step(overflow(step)));
  return out;
}

}  // namespace

TEST_CASE("defaults are GradScaler's: 65536, x2 after 2000 finite steps, x0.5 on overflow") {
  LossScaler scaler(cpu_backend());
  CHECK(scaler.scale() == 65536.0f);
  CHECK(scaler.options().growth_factor == 2.0f);
  CHECK(scaler.options().backoff_factor == 0.5f);
  CHECK(scaler.options().growth_interval == 2000);
}

TEST_CASE("a fixed pattern of overflows gives GradScaler's (scale, skipped) sequence, growth interval 3") {
  // Bursts, isolated overflows, and runs long enough to grow, twice in a row.
  auto overflow = [](int step) {
    return step < 3 || step == 5 || step == 9 || step == 10 || (step >= 20 && step < 24) || step == 40;
  };
  LossScaler scaler(cpu_backend(), LossScalerOptions{1024.0f, 2.0f, 0.5f, 3});
  const auto got = run_scaler(scaler, 50, overflow);
  const auto expected = run_rule(GradScalerRule{1024.0f, 2.0f, 0.5f, 3}, 50, overflow);
  CHECK(got == expected);
  // Spelled out for the first steps: three overflows halve 1024 three times; growth after 3 finite steps (6-8);
  // two overflows in a row (9, 10); growth again after 11-13 and 14-16.
  const std::vector<std::pair<float, bool>> first = {
      {1024, true}, {512, true}, {256, true}, {128, false}, {128, false}, {128, true}, {64, false},
      {64, false},  {64, false}, {128, true}, {64, true},   {32, false},  {32, false}, {32, false},
      {64, false},  {64, false}, {64, false}, {128, false}};
  CHECK(std::vector<std::pair<float, bool>>(got.begin(), got.begin() + 18) == first);
}

TEST_CASE("default options over 7000 steps with sparse overflows match the rule") {
  auto overflow = [](int step) { return step == 0 || step == 2500 || step == 2501 || step == 6100; };
  LossScaler scaler(cpu_backend());
  const auto got = run_scaler(scaler, 7000, overflow);
  const auto expected = run_rule(GradScalerRule{65536.0f, 2.0f, 0.5f, 2000}, 7000, overflow);
  CHECK(got == expected);
  CHECK(got[2001].first == 65536.0f);  // 32768 after step 0, doubled after steps 1..2000
}

TEST_CASE("the scale never grows past fp32's range, and a NaN counts as an overflow") {
  LossScaler scaler(cpu_backend(), LossScalerOptions{std::ldexp(1.0f, 127), 2.0f, 0.5f, 1});
  CHECK_FALSE(scaler.update(0.0f));
  CHECK(scaler.scale() == std::ldexp(1.0f, 127));  // 2^128 is inf: kept
  CHECK(scaler.growth_tracker() == 0);
  std::vector<float> grads = {1.0f, NAN, 2.0f};
  scaler.unscale(grads.data(), grads.size());
  CHECK(scaler.found_inf() == 1.0f);
  CHECK(scaler.update(scaler.found_inf()));
  CHECK(scaler.scale() == std::ldexp(1.0f, 126));
  CHECK(scaler.found_inf() == 0.0f);  // cleared for the next step
  CHECK(scaler.update(std::numeric_limits<float>::quiet_NaN()));  // a combined flag that is NaN: skip
}

TEST_CASE("unscale multiplies by the reciprocal and flags inf or NaN on any shard; flags combine by summing") {
  // Two ranks, each holding a shard: rank 1's shard overflows, rank 0's does not. The sum of their flags (one
  // allreduce) makes both skip and back off alike.
  LossScaler rank0(cpu_backend(), LossScalerOptions{8.0f, 2.0f, 0.5f, 2000});
  LossScaler rank1(cpu_backend(), LossScalerOptions{8.0f, 2.0f, 0.5f, 2000});
  std::vector<float> shard0(100000, 4.0f), shard1(100000, 4.0f);
  shard1[99999] = -INFINITY;
  rank0.unscale(shard0.data(), shard0.size());
  rank1.unscale(shard1.data(), 50000);  // a rank may unscale its buffer in parts; the flag covers them all
  rank1.unscale(shard1.data() + 50000, 50000);
  CHECK(shard0[0] == 0.5f);
  CHECK(shard1[0] == 0.5f);
  CHECK(std::isinf(shard1[99999]));
  CHECK(rank0.found_inf() == 0.0f);
  CHECK(rank1.found_inf() == 1.0f);
  const float combined = rank0.found_inf() + rank1.found_inf();
  CHECK(rank0.update(combined));
  CHECK(rank1.update(combined));
  CHECK(rank0.scale() == 4.0f);
  CHECK(rank1.scale() == 4.0f);
}

TEST_CASE("options outside GradScaler's asserts are refused; restore() brings back a checkpointed state") {
  CHECK_THROWS_AS(LossScaler(cpu_backend(), LossScalerOptions{65536.0f, 1.0f, 0.5f, 2000}), std::invalid_argument);
  CHECK_THROWS_AS(LossScaler(cpu_backend(), LossScalerOptions{65536.0f, 2.0f, 1.0f, 2000}), std::invalid_argument);
  CHECK_THROWS_AS(LossScaler(cpu_backend(), LossScalerOptions{0.0f, 2.0f, 0.5f, 2000}), std::invalid_argument);
  CHECK_THROWS_AS(LossScaler(cpu_backend(), LossScalerOptions{65536.0f, 2.0f, 0.5f, 0}), std::invalid_argument);
  LossScaler scaler(cpu_backend(), LossScalerOptions{65536.0f, 2.0f, 0.5f, 3});
  scaler.restore(512.0f, 2);
  CHECK_FALSE(scaler.update(0.0f));
  CHECK(scaler.scale() == 1024.0f);
  CHECK_THROWS_AS(scaler.restore(512.0f, 3), std::invalid_argument);
}

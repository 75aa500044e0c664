// The GPT model under mixed precision (Gpt precision bf16 / fp16): the working copy is the master rounded, losses
// and gradients stay close to fp32's, loss scaling by a power of two is exact in bf16, and the 16-bit activations
// take less memory. tests/parity/test_mixed_precision.py checks the same model against PyTorch.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "trainer/kernels/half.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/gpt.h"

using namespace dtrain::trainer;
using dtrain::trainer::kernels::Dtype;

namespace {

GptConfig shape() { return GptConfig{16, 50, 128, 2, 2, 16}; }

struct Run {
  float loss = 0;
  std::vector<float> grads;
  std::size_t activation_bytes = 0;
};

Run run(Dtype precision, float loss_scale) {
  Gpt model(shape(), kernels::cpu_backend(), 1, precision);
  model.init_weights(11);
  model.refresh_working_params();
  const int B = 2, T = 12;
  std::mt19937 rng(3);
  std::vector<std::int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = static_cast<std::int32_t>(rng() % 50);
    targets[i] = static_cast<std::int32_t>(rng() % 50);
  }
  Run r;
  model.zero_grad();
  r.loss = model.forward(inputs.data(), targets.data(), B, T);
  model.backward(loss_scale, {});
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  r.activation_bytes = model.activation_bytes();
  return r;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("the 16-bit working copy is the master rounded to nearest even") {
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    Gpt model(shape(), kernels::cpu_backend(), 1, type);
    model.init_weights(5);
    model.refresh_working_params();
    REQUIRE(model.working_params() != nullptr);
    for (std::size_t i = 0; i < model.buffer_size(); ++i)
      REQUIRE(model.working_params()[i] == kernels::half_from_float(model.params()[i], type));
  }
  Gpt fp32(shape());
  fp32.refresh_working_params();
  CHECK(fp32.working_params() == nullptr);
}

TEST_CASE("bf16 and fp16 losses and gradients stay close to fp32's") {
  const Run fp32 = run(Dtype::fp32, 1.0f);
  for (Dtype type : {Dtype::bf16, Dtype::fp16}) {
    CAPTURE(kernels::dtype_name(type));
    const Run half = run(type, 1.0f);
    CHECK(std::abs(half.loss - fp32.loss) < 1e-2);
    CHECK(half.loss != fp32.loss);  // the products really took 16-bit inputs
    CHECK(relative_difference(half.grads, fp32.grads) < 5e-2);
    CHECK(half.activation_bytes < fp32.activation_bytes);
  }
}

TEST_CASE("a power-of-two loss scale scales bf16 gradients exactly") {
  // bf16 has fp32's exponent range, so rounding commutes with a power-of-two factor: the scaled backward is the
  // unscaled one times the factor, bit for bit.
  const Run one = run(Dtype::bf16, 1.0f);
  const Run scaled = run(Dtype::bf16, 1024.0f);
  for (std::size_t i = 0; i < one.grads.size(); ++i) REQUIRE(scaled.grads[i] == one.grads[i] * 1024.0f);
}

TEST_CASE("fp16 gradients under a loss scale unscale to the unscaled ones") {
  const Run one = run(Dtype::fp16, 1.0f);
  Run scaled = run(Dtype::fp16, 65536.0f);
  for (float& g : scaled.grads) g /= 65536.0f;
  CHECK(relative_difference(scaled.grads, one.grads) < 1e-2);
}

#include "trainer/model/activations.h"

#include <algorithm>

namespace dtrain::trainer {

Gpt::Activations::Activations(kernels::Backend& b, const GptConfig& c, int layers, const Widths& w,
                              kernels::Dtype precision, Recompute recompute, std::size_t BT, std::size_t BTT,
                              int shards)
    : backend(b), capacity_bt(BT), capacity_att(BTT) {
  const std::size_t C = c.channels, NH = w.heads, Vp = w.vocab;
  const std::size_t QKV = w.qkv, ATT = w.att, FC = w.fc;
  // Layers kept: of the block's activations (full recompute: one, rebuilt before each block's backward), and of
  // attention's probabilities (selective and full: one).
  const std::size_t L = recompute == Recompute::full ? 1 : static_cast<std::size_t>(layers);
  const std::size_t L_att = recompute == Recompute::none ? L : 1;
  const std::size_t n = BT / static_cast<std::size_t>(shards);  // this rank's tokens of the residual stream
  // Token ids are 4 bytes, as a float is.
  static_assert(sizeof(std::int32_t) == sizeof(float));
  inputs = reinterpret_cast<std::int32_t*>(backend.allocate(BT));
  targets = reinterpret_cast<std::int32_t*>(backend.allocate(BT));
  encoded = take(n * C);
  ln1 = take_input(precision, L, BT * C);
  ln1_mean = take(L * n);
  ln1_rstd = take(L * n);
  qkv = take(L * BT * QKV);
  atty = take_input(precision, L, BT * ATT);
  att = take(L_att * NH * BTT);
  residual2 = take(L * n * C);
  ln2 = take_input(precision, L, BT * C);
  ln2_mean = take(L * n);
  ln2_rstd = take(L * n);
  fch = take(L * BT * FC);
  fch_gelu = take_input(precision, L, BT * FC);
  residual3 = take(static_cast<std::size_t>(layers) * n * C);  // each block's output: the next one's input
  lnf = take_input(precision, 1, BT * C);
  lnf_mean = take(n);
  lnf_rstd = take(n);
  probs = take(BT * Vp);
  losses = take(BT);
  proj = take(BT * C);
  dresidual = take(n * C);
  if (shards > 1) dln = take(2 * C);
  dbtc = take(BT * C);
  dbig = take(BT * std::max({C, QKV, FC}));
  if (precision != kernels::Dtype::fp32) dout_half = take_half(BT * std::max({Vp, FC, QKV, C}));
}

Gpt::Activations::~Activations() {
  for (float* p : owned) backend.release(p);
  backend.release(reinterpret_cast<float*>(inputs));
  backend.release(reinterpret_cast<float*>(targets));
  backend.release(att_scratch);
}

void Gpt::Activations::ensure_scratch(std::size_t count) {
  if (count <= att_scratch_count) return;
  backend.release(att_scratch);
  att_scratch = backend.allocate(count);
  att_scratch_count = count;
}

float* Gpt::Activations::take(std::size_t count) {
  owned.push_back(backend.allocate(count));
  owned_count += count;
  return owned.back();
}

// The backend allocates floats; two 16-bit values share one.
std::uint16_t* Gpt::Activations::take_half(std::size_t count) {
  return reinterpret_cast<std::uint16_t*>(take((count + 1) / 2));
}

MatmulInput Gpt::Activations::take_input(kernels::Dtype precision, std::size_t layers, std::size_t stride) {
  MatmulInput input;
  input.stride = stride;
  if (precision == kernels::Dtype::fp32) {
    input.f32 = take(layers * stride);
  } else {
    input.h16 = take_half(layers * stride);
  }
  return input;
}

}  // namespace dtrain::trainer

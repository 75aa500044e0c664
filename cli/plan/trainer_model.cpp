#include "cli/plan/trainer_model.h"

#include <algorithm>

namespace dtrain::plan {

std::size_t trainer_params(const trainer::GptConfig& config) { return trainer::ParamLayout(config).num_params(); }

std::size_t fp32_kernel_values(const trainer::ParamLayout& layout) {
  using trainer::LayerTensor;
  std::size_t values = layout.wte().count + layout.wpe().count + layout.lnfw().count + layout.lnfb().count;
  for (int l = 0; l < layout.config().num_layers; ++l) {
    for (LayerTensor t : {LayerTensor::ln1w, LayerTensor::ln1b, LayerTensor::qkvb, LayerTensor::attprojb,
                          LayerTensor::ln2w, LayerTensor::ln2b, LayerTensor::fcb, LayerTensor::fcprojb})
      values += layout.layer_tensor(l, t).count;
  }
  return values;
}

std::optional<trainer::ZeroMemory> trainer_model_states(const trainer::GptConfig& config, int stage,
                                                        Precision precision, int world) {
  if (stage == 0) return std::nullopt;
  const trainer::ParamLayout layout(config, world);
  if (precision == Precision::fp32) return trainer::zero_memory(stage, layout.buffer_size(), world);
  return trainer::mixed_zero_memory(stage, layout.buffer_size(), world, /*master_sharded=*/true,
                                    fp32_kernel_values(layout));
}

std::size_t trainer_activation_bytes(const trainer::GptConfig& config, int micro_batch, int seq_len,
                                     Precision precision, trainer::Recompute recompute) {
  const std::size_t BT = static_cast<std::size_t>(micro_batch) * seq_len, T = seq_len;
  const std::size_t C = config.channels, NH = config.num_heads, Vp = config.padded_vocab_size;
  const std::size_t L = config.num_layers;
  // Layers kept of a block's activations, and of attention's probabilities.
  const std::size_t kept = recompute == trainer::Recompute::full ? 1 : L;
  const std::size_t kept_att = recompute == trainer::Recompute::none ? L : 1;
  const bool half = precision != Precision::fp32;
  // A matrix product's input: fp32, or two 16-bit values to a float.
  auto input = [&](std::size_t values) { return half ? (values + 1) / 2 : values; };
  std::size_t floats = BT * C;                          // encoded
  floats += 2 * input(kept * BT * C);                   // ln1, ln2
  floats += 4 * kept * BT;                              // their means and reciprocal deviations
  floats += kept * BT * 3 * C;                          // qkv
  floats += input(kept * BT * C);                       // atty
  floats += kept_att * NH * BT * T;                     // att
  floats += kept * BT * C;                              // residual2
  floats += kept * BT * 4 * C + input(kept * BT * 4 * C);  // fch, fch_gelu
  floats += L * BT * C;                                 // residual3: every block's output, kept
  floats += input(BT * C) + 2 * BT;                     // lnf and its statistics
  floats += 2 * BT * Vp + BT;                           // probs, the logits, losses
  floats += 3 * BT * C + BT * 4 * C;                    // proj, dresidual, dbtc, dbig
  if (half) floats += (BT * std::max(Vp, 4 * C) + 1) / 2;  // dout_half
  return floats * sizeof(float);
}

}  // namespace dtrain::plan

#include "cli/plan/trainer_model.h"

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

}  // namespace dtrain::plan

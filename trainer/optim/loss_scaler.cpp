#include "trainer/optim/loss_scaler.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {
namespace {

void check(bool ok, const std::string& field, float value, const char* range) {
  if (!ok) {
    throw std::invalid_argument("LossScalerOptions." + field + " = " + std::to_string(value) + " must be " + range +
                                " (torch.cuda.amp.GradScaler asserts the same)");
  }
}

}  // namespace

LossScaler::LossScaler(kernels::Backend& backend, LossScalerOptions options)
    : backend_(backend), options_(options), scale_(options.init_scale) {
  check(std::isfinite(options.init_scale) && options.init_scale > 0, "init_scale", options.init_scale,
        "finite and > 0");
  check(options.growth_factor > 1.0f, "growth_factor", options.growth_factor, "> 1");
  check(options.backoff_factor > 0.0f && options.backoff_factor < 1.0f, "backoff_factor", options.backoff_factor,
        "in (0, 1)");
  check(options.growth_interval > 0, "growth_interval", static_cast<float>(options.growth_interval), "> 0");
}

void LossScaler::unscale(float* grads, std::size_t n) {
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  if (backend_.unscale_and_check(grads, n, inv_scale)) found_inf_ = true;
}

bool LossScaler::update(float found_inf_any_rank) {
  const bool skipped = !(found_inf_any_rank == 0.0f);  // NaN counts as found
  found_inf_ = false;
  if (skipped) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return true;
  }
  const int successful = growth_tracker_ + 1;
  if (successful == options_.growth_interval) {
    const float grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
  return false;
}

void LossScaler::restore(float scale, int growth_tracker) {
  check(std::isfinite(scale) && scale > 0, "restored scale", scale, "finite and > 0");
  check(growth_tracker >= 0 && growth_tracker < options_.growth_interval, "restored growth_tracker",
        static_cast<float>(growth_tracker), "in [0, growth_interval)");
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  found_inf_ = false;
}

}  // namespace dtrain::trainer

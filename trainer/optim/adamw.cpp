#include "trainer/optim/adamw.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {

AdamW::AdamW(kernels::Backend& backend, std::size_t num_params, std::vector<ParamRange> decay_ranges,
             AdamWOptions options)
    : backend_(backend), n_(num_params), decay_ranges_(std::move(decay_ranges)), options_(options) {
  std::size_t end = 0;
  for (const ParamRange& r : decay_ranges_) {
    if (r.offset < end || r.offset + r.count > n_)
      throw std::invalid_argument("AdamW: decay range [" + std::to_string(r.offset) + ", " +
                                  std::to_string(r.offset + r.count) +
                                  ") overlaps the previous one or runs past the " + std::to_string(n_) +
                                  " parameters; pass ParamLayout::decay_ranges()");
    end = r.offset + r.count;
  }
  m_ = backend_.allocate(n_);
  v_ = backend_.allocate(n_);
}

AdamW::~AdamW() {
  backend_.release(v_);
  backend_.release(m_);
}

void AdamW::step(float* params, const float* grads, float lr, long t) {
  if (t < 1) throw std::invalid_argument("AdamW::step: step count t must start at 1, got " + std::to_string(t));
  const AdamWOptions& o = options_;
  auto update = [&](std::size_t offset, std::size_t count, float weight_decay) {
    if (count == 0) return;
    backend_.adamw_update(params + offset, grads + offset, m_ + offset, v_ + offset, count, lr, o.beta1, o.beta2,
                          o.eps, weight_decay, t);
  };
  std::size_t at = 0;
  for (const ParamRange& r : decay_ranges_) {
    update(at, r.offset - at, 0.0f);
    update(r.offset, r.count, o.weight_decay);
    at = r.offset + r.count;
  }
  update(at, n_ - at, 0.0f);
}

float clip_grad_norm(kernels::Backend& backend, float* grads, std::size_t n, float max_norm) {
  const float norm = static_cast<float>(std::sqrt(backend.sum_squares(grads, n)));
  if (max_norm > 0.0f) {
    const float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) backend.scale(grads, n, coef);
  }
  return norm;
}

}  // namespace dtrain::trainer

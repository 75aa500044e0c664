#include "trainer/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {

AdamW::AdamW(kernels::Backend& backend, std::size_t num_params, std::vector<ParamRange> decay_ranges,
             AdamWOptions options, std::size_t buffer_size)
    : backend_(backend),
      n_(num_params),
      buffer_size_(buffer_size == 0 ? num_params : buffer_size),
      decay_ranges_(std::move(decay_ranges)),
      options_(options) {
  std::size_t end = 0;
  for (const ParamRange& r : decay_ranges_) {
    if (r.offset < end || r.offset + r.count > buffer_size_)
      throw std::invalid_argument("AdamW: decay range [" + std::to_string(r.offset) + ", " +
                                  std::to_string(r.offset + r.count) +
                                  ") overlaps the previous one or runs past the " + std::to_string(buffer_size_) +
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
  if (buffer_size_ != n_)
    throw std::logic_error("AdamW::step: the state covers " + std::to_string(n_) + " of " +
                           std::to_string(buffer_size_) + " parameters; use step_spans() for shards");
  step_spans(params, grads, {ParamSpan{0, n_, 0}}, lr, t);
}

void AdamW::step_spans(float* params, const float* grads, const std::vector<ParamSpan>& spans, float lr, long t) {
  if (t < 1) throw std::invalid_argument("AdamW::step: step count t must start at 1, got " + std::to_string(t));
  const AdamWOptions& o = options_;
  for (const ParamSpan& span : spans) {
    if (span.offset + span.count > buffer_size_ || span.state_offset + span.count > n_)
      throw std::invalid_argument("AdamW::step_spans: span [" + std::to_string(span.offset) + ", " +
                                  std::to_string(span.offset + span.count) + ") with state at " +
                                  std::to_string(span.state_offset) + " runs past the buffer (" +
                                  std::to_string(buffer_size_) + ") or the state (" + std::to_string(n_) + ")");
    auto update = [&](std::size_t offset, std::size_t count, float weight_decay) {
      if (count == 0) return;
      const std::size_t state = span.state_offset + (offset - span.offset);
      backend_.adamw_update(params + offset, grads + offset, m_ + state, v_ + state, count, lr, o.beta1, o.beta2,
                            o.eps, weight_decay, t);
    };
    std::size_t at = span.offset;
    const std::size_t end = span.offset + span.count;
    for (const ParamRange& r : decay_ranges_) {
      const std::size_t lo = std::max(r.offset, at), hi = std::min(r.offset + r.count, end);
      if (lo >= hi) continue;
      update(at, lo - at, 0.0f);
      update(lo, hi - lo, o.weight_decay);
      at = hi;
    }
    update(at, end - at, 0.0f);
  }
}

float clip_grad_norm(kernels::Backend& backend, float* grads, std::size_t n, float max_norm) {
  const float norm = static_cast<float>(std::sqrt(backend.sum_squares(grads, n)));
  if (max_norm > 0.0f) {
    const float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) backend.scale(grads, n, coef);
  }
  return norm;
}

void clip_grad_norm_to(kernels::Backend& backend, float* grads, std::size_t n, float max_norm, float* norm,
                       double* sum_sq) {
  backend.zero(reinterpret_cast<float*>(sum_sq), 2);  // +0.0
  backend.add_sum_squares(sum_sq, grads, n);
  backend.norm_of(norm, sum_sq);
  backend.clip_to(grads, n, norm, max_norm);
}

}  // namespace dtrain::trainer

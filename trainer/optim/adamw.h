#pragma once

// AdamW over the model's flat parameter buffer, as torch.optim.AdamW (decoupled weight decay, bias correction),
// with weight decay only on the 2-D weights (nanoGPT's configure_optimizers: wte, wpe and the four matrices of each
// block), and the global-norm gradient clipping of torch.nn.utils.clip_grad_norm_.

#include <cstddef>
#include <vector>

#include "trainer/kernels/backend.h"
#include "trainer/model/layout.h"

namespace dtrain::trainer {

struct AdamWOptions {
  float lr = 6e-4f;            // peak learning rate; step() takes the scheduled value
  float beta1 = 0.9f;          // first-moment decay
  float beta2 = 0.95f;         // second-moment decay (nanoGPT/llm.c use 0.95; torch's default is 0.999)
  float eps = 1e-8f;           // added to sqrt(v_hat)
  float weight_decay = 0.1f;   // decoupled decay, applied to decay ranges only
};

// A range of the parameter buffer and where its m and v start in the optimizer's state (ZeRO: a rank's shard of a
// unit, trainer/parallel/zero/shards.h).
struct ParamSpan {
  std::size_t offset = 0;        // first float in the parameter (and gradient) buffer
  std::size_t count = 0;         // floats
  std::size_t state_offset = 0;  // first float in m and v
};

class AdamW {
 public:
  // State for num_params floats (m and v start at zero); decay_ranges: increasing, non-overlapping ranges of the
  // parameter buffer that get weight decay (ParamLayout::decay_ranges()); everything else gets weight_decay 0.
  // buffer_size: floats in the parameter buffer when the state covers only part of it (ZeRO shards, step_spans());
  // 0 means num_params.
  AdamW(kernels::Backend& backend, std::size_t num_params, std::vector<ParamRange> decay_ranges,
        AdamWOptions options, std::size_t buffer_size = 0);
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  ~AdamW();

  // One update of params[0, num_params) with grads, learning rate lr, 1-based step t (bias correction uses t).
  void step(float* params, const float* grads, float lr, long t);
  // The same update on the given spans of the buffers only, each with its own state (decay ranges intersected):
  // ZeRO's step over the shards a rank owns.
  void step_spans(float* params, const float* grads, const std::vector<ParamSpan>& spans, float lr, long t);

  const AdamWOptions& options() const { return options_; }
  std::size_t num_params() const { return n_; }
  // First and second moments, num_params floats each, in the parameter buffer's layout (for the state file).
  float* m() { return m_; }
  float* v() { return v_; }
  const float* m() const { return m_; }
  const float* v() const { return v_; }

 private:
  kernels::Backend& backend_;
  std::size_t n_;
  std::size_t buffer_size_;
  std::vector<ParamRange> decay_ranges_;
  AdamWOptions options_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

// torch.nn.utils.clip_grad_norm_: norm = sqrt(sum of squares of grads[0, n)); when max_norm > 0 and
// max_norm / (norm + 1e-6) < 1, grads are scaled by that factor. Returns the norm before clipping.
// max_norm <= 0 only measures.
float clip_grad_norm(kernels::Backend& backend, float* grads, std::size_t n, float max_norm);
// The same with the norm left where the backend keeps it, so that a step on a device reads nothing back: *norm
// (backend memory) = the norm before clipping; sum_sq: a double of the backend's memory, scratch. Same bits.
void clip_grad_norm_to(kernels::Backend& backend, float* grads, std::size_t n, float max_norm, float* norm,
                       double* sum_sq);

}  // namespace dtrain::trainer

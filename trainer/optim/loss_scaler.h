#pragma once

// Dynamic loss scaling for fp16 training, with torch.cuda.amp.GradScaler's semantics exactly (its defaults, its
// unscale, its update rule; see aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp). bf16 needs none: it has fp32's
// range. Per optimizer step:
//
//   backward with the loss multiplied by scaler.scale()      (fp16 gradients that would underflow no longer do)
//   scaler.unscale(grads, n)                                 (grads /= scale; notes any inf or NaN; once per buffer
//                                                             or per shard this rank holds, before clipping)
//   float found = scaler.found_inf();                        (0 or 1 on this rank)
//   comm.allreduce(&found, 1)->wait();                       (with more than one rank: a sum, > 0 if any overflowed)
//   if (!scaler.update(found)) optimizer step                (update() returns true when the step is skipped)
//
// update(found): found > 0 halves the scale (backoff_factor) and resets the run of finite steps; the step is
// skipped, so AdamW's step count t does not advance (the learning-rate schedule still does: it counts steps taken,
// overflowing or not, as torch's LR schedulers called once per iteration do). Otherwise the run grows by one, and
// when it reaches growth_interval the scale doubles (growth_factor), unless that would make it inf ("do not grow
// the scale past fp32 bounds"), and the run starts again from 0.
//
// Every rank holds the same scale: each starts from init_scale and applies the same combined flag.

#include <cstddef>
#include <cstdint>

#include "trainer/kernels/backend.h"

namespace dtrain::trainer {

struct LossScalerOptions {
  float init_scale = 65536.0f;  // 2^16, GradScaler's init_scale
  float growth_factor = 2.0f;   // > 1: the scale's factor after growth_interval finite steps in a row
  float backoff_factor = 0.5f;  // in (0, 1): the scale's factor after a step with an inf or NaN gradient
  int growth_interval = 2000;   // > 0: finite steps in a row before the scale grows
};

class LossScaler {
 public:
  // Throws std::invalid_argument naming the field when an option is out of its range (as GradScaler asserts).
  LossScaler(kernels::Backend& backend, LossScalerOptions options = {});

  // The factor the loss (the gradient of the objective) is multiplied by before backward.
  float scale() const { return scale_; }
  // Finite steps in a row since the scale last changed (GradScaler's _growth_tracker).
  int growth_tracker() const { return growth_tracker_; }
  const LossScalerOptions& options() const { return options_; }

  // grads[0, n) *= 1 / scale() (the reciprocal taken in double, then rounded to float, as GradScaler does), and
  // remembers whether any element was inf or NaN. May be called for several buffers in one step; the flag covers
  // them all until update().
  void unscale(float* grads, std::size_t n);
  // 1.0f when a gradient unscaled since the last update() was inf or NaN, else 0.0f: a float so that the ranks
  // combine their flags with one sum-allreduce.
  float found_inf() const { return found_inf_ ? 1.0f : 0.0f; }

  // Ends the step with the flag combined over every rank (any value > 0, or NaN, means an overflow somewhere;
  // a single rank passes found_inf()). Updates the scale as described at the top and clears this rank's flag.
  // Returns true when the step must be skipped (no optimizer update).
  bool update(float found_inf_any_rank);

  // For checkpoints: the scale and the growth tracker, restored with restore() on resume.
  void restore(float scale, int growth_tracker);

 private:
  kernels::Backend& backend_;
  LossScalerOptions options_;
  float scale_;
  int growth_tracker_ = 0;
  bool found_inf_ = false;
};

}  // namespace dtrain::trainer

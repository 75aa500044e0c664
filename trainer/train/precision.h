#pragma once

// Mixed precision in the training loop (loop.h): the precision and DDP communication dtype the flags ask for
// (combinations that are not supported are refused), and fp16's dynamic loss scaling around the optimizer step:
//   backward(loss_scale = scale / K ...)                 the objective multiplied by the loss scale
//   skipped = scaling.finish(step, grads, spans)          after the gradient reduction: unscale what this rank holds,
//                                                         combine the inf/NaN flag over ranks, update the scale
//   clip; if (!skipped) AdamW step with t = steps taken + 1
// An overflowing step leaves the parameters and AdamW's moments and t untouched; the learning-rate schedule still
// advances (it counts optimizer steps attempted, as a torch LR scheduler stepped once per iteration does).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "trainer/ckpt/state_file.h"
#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/optim/loss_scaler.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

// --precision as a Dtype; a name that is not one is refused (std::invalid_argument, exit code 2). fp16 checkpoints
// carry the loss scaler's state and AdamW's step count (PrecisionState in trainer/ckpt/state_file.h).
kernels::Dtype training_precision(const TrainOptions& options);
// --ddp-comm-dtype as a Dtype; anything but fp32 with --zero 1..3 is refused (std::invalid_argument).
kernels::Dtype ddp_comm_dtype(const TrainOptions& options);
// --param-dtype as a Dtype (the --precision when not given). Given, it needs --zero 1..3 (the stages that
// all-gather parameters) and must be fp32 or the --precision; otherwise std::invalid_argument.
kernels::Dtype param_dtype(const TrainOptions& options);
// --reduce-dtype as a Dtype; anything but fp32 needs --zero 1..3 (DDP has --ddp-comm-dtype), else
// std::invalid_argument.
kernels::Dtype reduce_dtype(const TrainOptions& options);

// Offset and count of gradient ranges in the model's buffer.
using GradSpans = std::vector<std::pair<std::size_t, std::size_t>>;

class LossScaling {
 public:
  LossScaling(const TrainOptions& options, Communicator& comm, kernels::Backend& backend);

  float scale() const { return scaler_.scale(); }
  // After the gradient reduction of 1-based `step`: puts an inf into rank 0's first gradient when
  // --inject-inf-steps names the step, unscales `spans` of grads (the ranges this rank holds reduced), combines the
  // overflow flag over every rank and updates the scale. Returns true when the step must be skipped.
  bool finish(std::uint64_t step, float* grads, const GradSpans& spans);
  // For checkpoints: the scaler's state beside AdamW's step count (steps skipped for an overflow do not count),
  // and back on resume, so that the resumed steps scale and skip as the uninterrupted run's would. restore() throws
  // std::invalid_argument when the checkpoint's growth tracker does not fit --loss-scale-growth-interval.
  PrecisionState checkpoint_state(std::uint64_t adam_steps) const;
  void restore(const PrecisionState& state);

 private:
  Communicator& comm_;
  kernels::Backend& backend_;
  LossScaler scaler_;
  std::vector<long> inject_;
};

}  // namespace dtrain::trainer

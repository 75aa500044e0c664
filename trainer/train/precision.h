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

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/optim/loss_scaler.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

// --precision as a Dtype. Throws std::invalid_argument (exit code 2) for what is not supported: fp16 with
// checkpoints (--save-every, --resume: the state file does not hold the loss scaler's state or AdamW's step count,
// which differ from the step once a step is skipped).
kernels::Dtype training_precision(const TrainOptions& options);
// --ddp-comm-dtype as a Dtype; anything but fp32 with --zero 1..3 is refused (std::invalid_argument).
kernels::Dtype ddp_comm_dtype(const TrainOptions& options);
// --param-dtype as a Dtype (the --precision when not given). Given, it needs --zero 3 (the only stage that gathers
// parameters for compute) and must be fp32 or the --precision; otherwise std::invalid_argument.
kernels::Dtype param_dtype(const TrainOptions& options);

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

 private:
  Communicator& comm_;
  LossScaler scaler_;
  std::vector<long> inject_;
};

}  // namespace dtrain::trainer

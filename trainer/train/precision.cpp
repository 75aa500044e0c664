#include "trainer/train/precision.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "trainer/common/host_wait.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/train/collectives.h"

namespace dtrain::trainer {
namespace {

kernels::Dtype parsed(const std::string& name, const char* flag) {
  const Result<kernels::Dtype> type = kernels::parse_dtype(name, flag);
  if (!type.ok()) throw std::invalid_argument(type.status.message());
  return type.value;
}

}  // namespace

kernels::Dtype training_precision(const TrainOptions& o) {
  return parsed(o.precision, "--precision");
}

kernels::Dtype ddp_comm_dtype(const TrainOptions& o) {
  const kernels::Dtype type = parsed(o.ddp_comm_dtype, "--ddp-comm-dtype");
  if (type != kernels::Dtype::fp32 && o.zero > 0) {
    throw std::invalid_argument("--ddp-comm-dtype " + o.ddp_comm_dtype + " applies to DDP (--zero 0) only; --zero " +
                                std::to_string(o.zero) + " reduces in fp32");
  }
  return type;
}

kernels::Dtype param_dtype(const TrainOptions& o) {
  const kernels::Dtype precision = parsed(o.precision, "--precision");
  if (o.param_dtype.empty()) return precision;
  const kernels::Dtype type = parsed(o.param_dtype, "--param-dtype");
  if (o.zero == 0)
    throw std::invalid_argument("--param-dtype applies to --zero 1, 2 and 3 (the stages that all-gather "
                                "parameters); drop it or add --zero");
  if (type != kernels::Dtype::fp32 && type != precision)
    throw std::invalid_argument("--param-dtype " + o.param_dtype + " with --precision " + o.precision + ": the "
                                "parameters are gathered in fp32 or in the --precision; use one of those");
  return type;
}

kernels::Dtype reduce_dtype(const TrainOptions& o) {
  const kernels::Dtype type = parsed(o.reduce_dtype, "--reduce-dtype");
  if (type != kernels::Dtype::fp32 && o.zero == 0)
    throw std::invalid_argument("--reduce-dtype " + o.reduce_dtype + " applies to --zero 1, 2 and 3; DDP (--zero 0) "
                                "has --ddp-comm-dtype " + o.reduce_dtype + " for the same");
  return type;
}

LossScaling::LossScaling(const TrainOptions& o, Communicator& comm, kernels::Backend& backend)
    : comm_(comm),
      backend_(backend),
      scaler_(backend, LossScalerOptions{.init_scale = o.loss_scale_init,
                                         .growth_interval = o.loss_scale_growth_interval}),
      inject_(o.inject_inf_steps) {}

bool LossScaling::finish(std::uint64_t step, float* grads, const GradSpans& spans) {
  // On a device the overflow flag is read back every step (common/host_wait.h), as torch.cuda.amp.GradScaler's
  // step() reads found_inf: whether AdamW steps is the host's decision.
  const AllowedHostWait allowed("fp16's overflow flag");
  const bool inject = std::find(inject_.begin(), inject_.end(), static_cast<long>(step)) != inject_.end();
  // Rank 0 only: the other ranks learn of it through the combined flag, as they would of a real overflow there.
  if (inject && comm_.rank() == 0 && !spans.empty()) {
    const float inf = std::numeric_limits<float>::infinity();
    backend_.copy_in(grads + spans.front().first, &inf, sizeof(inf));  // grads may be device memory
  }
  for (const auto& [offset, count] : spans) scaler_.unscale(grads + offset, count);
  float found = scaler_.found_inf();
  if (comm_.size() > 1) {
    on_host_floats(comm_, &found, 1,
                   [&](float* p) { wait_collective(*comm_.allreduce(p, 1), "allreduce (the fp16 overflow flags)"); });
  }
  return scaler_.update(found);
}

PrecisionState LossScaling::checkpoint_state(std::uint64_t adam_steps) const {
  return PrecisionState{adam_steps, scaler_.scale(), scaler_.growth_tracker()};
}

void LossScaling::restore(const PrecisionState& state) {
  const int interval = scaler_.options().growth_interval;
  if (state.growth_tracker >= interval) {
    throw std::invalid_argument("the checkpoint's loss scaler has had " + std::to_string(state.growth_tracker) +
                                " finite steps in a row, at or past this run's --loss-scale-growth-interval " +
                                std::to_string(interval) + ", so the scale would never grow again; resume with the "
                                "interval the checkpoint was written with (more than " +
                                std::to_string(state.growth_tracker) + ")");
  }
  scaler_.restore(state.loss_scale, state.growth_tracker);
}

}  // namespace dtrain::trainer

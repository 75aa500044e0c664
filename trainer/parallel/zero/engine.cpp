#include "trainer/parallel/zero/engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/parallel/zero/pages.h"

namespace dtrain::trainer {
namespace {

std::vector<ParamSpan> owned_spans(const ZeroShards& shards) {
  std::vector<ParamSpan> spans;
  for (const ShardSpan& s : shards.owned()) spans.push_back({s.offset, s.count, s.state_offset});
  return spans;
}

// The model's backend when its buffers are device memory (a GPU: the host cannot touch them), else null.
kernels::Backend* device_of(const Gpt& model) {
  return model.backend().host_accessible() ? nullptr : &model.backend();
}

int checked_stage(int stage) {
  if (stage < 1 || stage > 3)
    throw std::invalid_argument("ZeroEngine: stage " + std::to_string(stage) + " is not 1, 2 or 3 (--zero 0 is "
                                "DDP, trainer/parallel/ddp)");
  return stage;
}

}  // namespace

ZeroEngine::ZeroEngine(int stage, Communicator& comm, Gpt& model, const AdamWOptions& options, ZeroDtypes dtypes)
    : stage_(checked_stage(stage)),
      comm_(comm),
      model_(model),
      device_(device_of(model)),
      shards_(model.layout(), comm.rank(), comm.size()),
      spans_(owned_spans(shards_)),
      optimizer_(model.backend(), shards_.shard_params(), model.layout().decay_ranges(), options,
                 shards_.padded_params()),
      reducer_(comm, shards_, model.grads(), stage >= 2, dtypes.reduce, &model.buffers(), device_),
      gather_phases_(numbered_phases("all-gather unit", shards_.num_units())),
      norm_scratch_(model.backend(), 2 * static_cast<std::size_t>(shards_.world()) + 5) {
  grads_ready_ = [this](std::size_t offset, std::size_t count) { reducer_.grads_ready(offset, count); };
  const kernels::Dtype param_dtype = dtypes.param.value_or(model.precision());
  if (param_dtype != kernels::Dtype::fp32 && param_dtype != model.precision())
    throw std::invalid_argument(std::string("ZeroEngine: parameters gathered in ") + kernels::dtype_name(param_dtype) +
                                " for a model in " + kernels::dtype_name(model.precision()) + "; gather in fp32 "
                                "or in the model's precision");
  sharded_master_ = param_dtype != kernels::Dtype::fp32;
  if (sharded_master_) model.read_params_from_working_copy();
  if (stage_ == 3 && sharded_master_) {
    HalfParams half{model.working_params(), model.compute_params(), model.precision(), {}};
    for (int u = 0; u < shards_.num_units(); ++u) half.widen.push_back(model.fp32_tensors(u));
    gatherer_ = std::make_unique<ParamGatherer>(comm, shards_, std::move(half), device_);
  } else if (stage_ == 3) {
    gatherer_ = std::make_unique<ParamGatherer>(comm, shards_, model.params(),
                                                RoundedCopy{model.working_params(), model.precision()}, device_);
    rounded_on_gather_ = model.working_params() != nullptr;
  }
  if (gatherer_) {
    model.set_unit_hooks({[this](int u) { gatherer_->gather(u); }, [this](int u) { gatherer_->release(u); }});
  }
}

ZeroMemory ZeroEngine::memory() const {
  if (model_.precision() == kernels::Dtype::fp32) return zero_memory(stage_, shards_.padded_params(), shards_.world());
  std::size_t widened = 0;
  for (int u = 0; u < shards_.num_units(); ++u)
    for (const ParamRange& r : model_.fp32_tensors(u)) widened += r.count;
  return mixed_zero_memory(stage_, shards_.padded_params(), shards_.world(), sharded_master_, widened);
}

void ZeroEngine::shard_params() {
  if (sharded_master_ && stage_ < 3) {
    // The whole working copy from the whole master while it is still here; no all-gather needed.
    model_.refresh_working_params();
    for (int u = 0; u < shards_.num_units(); ++u) widen_unit(u);
    release_master();
    return;
  }
  if (sharded_master_) {
    release_master();
  } else if (!rounded_on_gather_) {
    model_.refresh_working_params();
  }
  if (gatherer_) gatherer_->release_all();
  if (sharded_master_)
    for (const ShardSpan& own : shards_.owned()) model_.refresh_working_params({own.offset, own.count});
}

void ZeroEngine::gather_params() {
  if (sharded_master_) {
    all_gather_master();
  } else if (gatherer_) {
    gatherer_->gather_all();
  }
}

void ZeroEngine::release_params() {
  if (sharded_master_) {
    release_master();
  } else if (gatherer_) {
    gatherer_->release_all();
  }
}

void ZeroEngine::refresh_working_params() {
  // The gatherer rounds each unit as it arrives.
  if (rounded_on_gather_) return;
  if (!sharded_master_) {
    model_.refresh_working_params();
    return;
  }
  for (const ShardSpan& own : shards_.owned()) model_.refresh_working_params({own.offset, own.count});
  if (stage_ < 3) counted_bytes_ += all_gather_working();
}

std::uint64_t ZeroEngine::all_gather_master() {
  if (shards_.world() == 1) return 0;
  std::uint64_t bytes = 0;
  std::vector<std::shared_ptr<Work>> works;
  for (int u = 0; u < shards_.num_units(); ++u) {
    const ShardSpan& own = shards_.owned(u);
    works.push_back(comm_.all_gather(model_.params() + own.offset, model_.params() + shards_.slice(u).offset,
                                     own.count));
    bytes += ring_bytes_sent(shards_.slice(u).count, shards_.world());
  }
  for (int u = 0; u < shards_.num_units(); ++u) wait_collective(works[u], gather_phases_[u]);
  return bytes;
}

std::uint64_t ZeroEngine::all_gather_working() {
  std::uint64_t bytes = 0;
  std::vector<std::shared_ptr<Work>> works;
  std::uint16_t* half = model_.working_params();
  if (shards_.world() > 1) {
    for (int u = 0; u < shards_.num_units(); ++u) {
      const ShardSpan& own = shards_.owned(u);
      works.push_back(comm_.all_gather_half(half + own.offset, half + shards_.slice(u).offset, own.count));
      bytes += ring_bytes_sent(shards_.slice(u).count, shards_.world(), sizeof(std::uint16_t));
    }
  }
  // Each unit is widened as soon as it has arrived, while the later ones are still on the wire.
  for (int u = 0; u < shards_.num_units(); ++u) {
    if (!works.empty()) wait_collective(works[u], gather_phases_[u]);
    widen_unit(u);
  }
  return bytes;
}

void ZeroEngine::widen_unit(int unit) {
  for (const ParamRange& r : model_.fp32_tensors(unit)) {
    float* wide = model_.compute_params() + r.offset;
    const std::uint16_t* half = model_.working_params() + r.offset;
    kernels::from_half_on(device_, wide, half, r.count, model_.precision());
  }
}

void ZeroEngine::release_master() {
  // Device memory has no pages to give back: the whole master stays allocated there (engine.h).
  if (device_ != nullptr) return;
  for (int u = 0; u < shards_.num_units(); ++u) {
    const ParamRange slice = shards_.slice(u);
    const ShardSpan& own = shards_.owned(u);
    release_outside(model_.params(), slice.offset, slice.offset + slice.count, own.offset, own.offset + own.count);
  }
}

void ZeroEngine::gather_moments(std::vector<float>& m, std::vector<float>& v) {
  m.assign(shards_.padded_params(), 0.0f);
  v.assign(shards_.padded_params(), 0.0f);
  if (device_ != nullptr) {
    gather_device_moments(m, v);
    return;
  }
  std::vector<std::shared_ptr<Work>> works;
  for (int u = 0; u < shards_.num_units(); ++u) {
    const ShardSpan& own = shards_.owned(u);
    const std::size_t at = shards_.slice(u).offset;
    std::copy_n(optimizer_.m() + own.state_offset, own.count, m.data() + own.offset);
    std::copy_n(optimizer_.v() + own.state_offset, own.count, v.data() + own.offset);
    if (shards_.world() == 1) continue;
    works.push_back(comm_.all_gather(m.data() + own.offset, m.data() + at, own.count));
    works.push_back(comm_.all_gather(v.data() + own.offset, v.data() + at, own.count));
  }
  for (auto& work : works) wait_collective(*work, "all-gather (AdamW's moments for a checkpoint)");
}

// The moments are device memory: each unit's shards are all-gathered into a scratch buffer of the communicator's
// memory (room for the largest unit's slice, for m and v) and copied out from there; with one rank the owned
// shards are the whole buffer and are copied out directly.
void ZeroEngine::gather_device_moments(std::vector<float>& m, std::vector<float>& v) {
  if (shards_.world() == 1) {
    for (const ShardSpan& own : shards_.owned()) {
      device_->copy_out(m.data() + own.offset, optimizer_.m() + own.state_offset, own.count * sizeof(float));
      device_->copy_out(v.data() + own.offset, optimizer_.v() + own.state_offset, own.count * sizeof(float));
    }
    return;
  }
  std::size_t largest = 0;
  for (int u = 0; u < shards_.num_units(); ++u) largest = std::max(largest, shards_.slice(u).count);
  float* scratch = comm_.allocate(2 * largest);
  try {
    for (int u = 0; u < shards_.num_units(); ++u) {
      const ShardSpan& own = shards_.owned(u);
      const ParamRange slice = shards_.slice(u);
      std::shared_ptr<Work> gm = comm_.all_gather(optimizer_.m() + own.state_offset, scratch, own.count);
      std::shared_ptr<Work> gv = comm_.all_gather(optimizer_.v() + own.state_offset, scratch + largest, own.count);
      wait_collective(*gm, "all-gather (AdamW's moments for a checkpoint)");
      wait_collective(*gv, "all-gather (AdamW's moments for a checkpoint)");
      comm_.copy_out(m.data() + slice.offset, scratch, slice.count);
      comm_.copy_out(v.data() + slice.offset, scratch + largest, slice.count);
    }
  } catch (...) {
    comm_.release(scratch);
    throw;
  }
  comm_.release(scratch);
}

void ZeroEngine::load_moments(const float* m, const float* v) {
  if (device_ != nullptr) {
    for (const ShardSpan& own : shards_.owned()) {
      device_->copy_in(optimizer_.m() + own.state_offset, m + own.offset, own.count * sizeof(float));
      device_->copy_in(optimizer_.v() + own.state_offset, v + own.offset, own.count * sizeof(float));
    }
    return;
  }
  for (const ShardSpan& own : shards_.owned()) {
    std::copy_n(m + own.offset, own.count, optimizer_.m() + own.state_offset);
    std::copy_n(v + own.offset, own.count, optimizer_.v() + own.state_offset);
  }
}

void ZeroEngine::zero_grad() {
  if (stage_ == 1) {
    model_.zero_grad();
    return;
  }
  // Outside the owned shards the gradient buffer already reads as zeros: the reducer released it.
  for (const ShardSpan& own : shards_.owned()) model_.backend().zero(model_.grads() + own.offset, own.count);
}

void ZeroEngine::begin_backward(bool last_micro_step) {
  reducer_.begin_backward(stage_ >= 2 || last_micro_step, last_micro_step);
}

void ZeroEngine::finish_backward() { reducer_.finish_backward(); }

float ZeroEngine::clip_grad_norm(float max_norm) {
  float* norm = norm_scratch_.data() + 2 * shards_.world() + 4;
  clip_grad_norm_to(max_norm, norm);
  float value = 0;
  model_.backend().copy_out(&value, norm, sizeof(value));
  return value;
}

void ZeroEngine::clip_grad_norm_to(float max_norm, float* norm) {
  kernels::Backend& k = model_.backend();
  // Every rank's sum travels as two floats (its float and the float of the rest), so the total keeps double
  // precision and the norm rounds to the float DDP's clip_grad_norm gets from its one double sum. All of it in the
  // backend's memory, so that on a device the host reads nothing.
  const int W = shards_.world(), r = shards_.rank();
  float* parts = norm_scratch_.data();
  double* local = norm_scratch_.as_double(2 * static_cast<std::size_t>(W));
  double* total = norm_scratch_.as_double(2 * static_cast<std::size_t>(W) + 2);
  k.zero(parts + 2 * W, 2);  // local = +0.0
  for (const ShardSpan& own : shards_.owned()) k.add_sum_squares(local, model_.grads() + own.offset, own.count);
  k.split_double(parts + 2 * r, local);
  if (W > 1) wait_collective(comm_.all_gather(parts + 2 * r, parts, 2), "all-gather (the gradient norms)");
  k.sum_parts(total, parts, 2 * static_cast<std::size_t>(W));
  k.norm_of(norm, total);
  for (const ShardSpan& own : shards_.owned()) k.clip_to(model_.grads() + own.offset, own.count, norm, max_norm);
}

void ZeroEngine::step(float lr, long t) {
  optimizer_.step_spans(model_.params(), model_.grads(), spans_, lr, t);
  // A sharded master's updated shards travel in 16 bits (refresh_working_params).
  if (stage_ < 3 && !sharded_master_) counted_bytes_ += all_gather_master();
}

ZeroStepStats ZeroEngine::take_stats() {
  ZeroStepStats stats;
  const std::uint64_t total = counted_bytes_ + reducer_.bytes_sent() + (gatherer_ ? gatherer_->bytes_sent() : 0);
  stats.comm_bytes = total - taken_bytes_;
  taken_bytes_ = total;
  if (gatherer_) {
    stats.gathered_peak_bytes = gatherer_->peak_bytes();
    gatherer_->reset_peak();
  }
  return stats;
}

}  // namespace dtrain::trainer

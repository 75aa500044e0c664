#include "trainer/parallel/zero/reducer.h"

#include <algorithm>
#include <stdexcept>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/parallel/zero/pages.h"

namespace dtrain::trainer {
namespace {

std::string range(std::size_t offset, std::size_t count) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + count) + ")";
}

// The 16-bit copy's memory when the reducer is given none: ordinary host memory, or the device's.
std::unique_ptr<BufferSource> own_source(kernels::Backend* device) {
  if (device != nullptr) return std::make_unique<BackendBuffers>(*device);
  return std::make_unique<HeapBuffers>();
}

}  // namespace

ZeroReducer::ZeroReducer(Communicator& comm, const ZeroShards& shards, float* grads, bool release_grads,
                         kernels::Dtype reduce_type, BufferSource* buffers, kernels::Backend* device)
    : comm_(comm),
      shards_(shards),
      grads_(grads),
      release_grads_(release_grads),
      reduce_type_(reduce_type),
      device_(device),
      own_buffers_(buffers == nullptr ? own_source(device) : nullptr),
      buffers_(buffers == nullptr ? own_buffers_.get() : buffers),
      phases_(numbered_phases("reduce-scatter unit", shards.num_units())) {}

ZeroReducer::~ZeroReducer() {
  // The communicator's thread may still write into grads_; it must be done before the buffer can go.
  for (const Pending& p : pending_) {
    try {
      p.work->wait();
    } catch (const std::exception&) {
      // Already unwinding or destroyed after a failure that finish_backward() reported.
    }
  }
  buffers_->release_half(half_);
  if (device_accumulated_ != nullptr) device_->release(device_accumulated_);
}

void ZeroReducer::begin_backward(bool sync, bool last) {
  if (in_pass_)
    throw std::logic_error("ZeroReducer::begin_backward: the previous backward pass was not finished; call "
                           "finish_backward() after every pass");
  in_pass_ = true;
  sync_ = sync;
  last_ = last;
  ready_from_ = shards_.padded_params();
  next_unit_ = shards_.num_units() - 1;
  failure_.clear();
}

void ZeroReducer::grads_ready(std::size_t offset, std::size_t count) {
  if (!in_pass_)
    throw std::logic_error("ZeroReducer::grads_ready" + range(offset, count) + " outside a backward pass; call "
                           "begin_backward() first");
  if (offset + count != ready_from_ || offset > ready_from_)
    throw std::logic_error("ZeroReducer::grads_ready" + range(offset, count) + ": expected a range ending at " +
                           std::to_string(ready_from_) + "; backward must report the whole padded buffer of " +
                           std::to_string(shards_.padded_params()) + " floats once, from its end to its start");
  ready_from_ = offset;
  while (next_unit_ >= 0 && ready_from_ <= shards_.slice(next_unit_).offset) {
    if (sync_) start_unit(next_unit_);
    --next_unit_;
  }
  if (release_grads_) {
    const std::string failed = retire(false);
    if (failure_.empty()) failure_ = failed;
  }
}

void ZeroReducer::start_unit(int unit) {
  if (shards_.world() == 1) return;
  const ParamRange slice = shards_.slice(unit);
  const ShardSpan& own = shards_.owned(unit);
  if (reduce_type_ == kernels::Dtype::fp32) {
    pending_.push_back({unit, comm_.reduce_scatter(grads_ + slice.offset, grads_ + own.offset, own.count)});
    bytes_sent_ += ring_bytes_sent(slice.count, shards_.world());
    return;
  }
  // Zero-filled by the kernel (buffers.h): pages resident only where a unit's slice is written.
  if (half_ == nullptr) half_ = buffers_->allocate_half(shards_.padded_params(), "ZeRO's 16-bit gradient copy");
  std::uint16_t* half = half_ + slice.offset;
  kernels::to_half_on(device_, half, grads_ + slice.offset, slice.count, reduce_type_);
  std::uint16_t* mine = half_ + own.offset;
  pending_.push_back({unit, comm_.reduce_scatter_half(half, mine, own.count, reduce_type_)});
  bytes_sent_ += ring_bytes_sent(slice.count, shards_.world(), sizeof(std::uint16_t));
}

void ZeroReducer::widen_owned(const Pending& p) {
  if (device_ != nullptr) {
    widen_owned_on_device(p);
    return;
  }
  const ParamRange slice = shards_.slice(p.unit);
  const ShardSpan& own = shards_.owned(p.unit);
  float* shard = grads_ + own.offset;
  kernels::from_half(shard, half_ + own.offset, own.count, reduce_type_);
  release_range(half_ + slice.offset, slice.count);
  if (!last_) {
    if (accumulated_.empty()) accumulated_.assign(shards_.shard_params(), 0.0f);
    float* sum = accumulated_.data() + own.state_offset;
    for (std::size_t i = 0; i < own.count; ++i) sum[i] += shard[i];
    std::fill_n(shard, own.count, 0.0f);
  } else if (!accumulated_.empty()) {
    float* sum = accumulated_.data() + own.state_offset;
    for (std::size_t i = 0; i < own.count; ++i) {
      shard[i] += sum[i];
      sum[i] = 0.0f;
    }
  }
}

// widen_owned's steps as the backend's ops: shard += sum is residual_forward(shard, shard, sum), the same fp32
// additions as the host's loop. The 16-bit slice is not released: there are no pages to give back.
void ZeroReducer::widen_owned_on_device(const Pending& p) {
  const ShardSpan& own = shards_.owned(p.unit);
  float* shard = grads_ + own.offset;
  device_->from_half(shard, half_ + own.offset, own.count, reduce_type_);
  if (!last_) {
    if (device_accumulated_ == nullptr) device_accumulated_ = device_->allocate(shards_.shard_params());
    float* sum = device_accumulated_ + own.state_offset;
    device_->residual_forward(sum, sum, shard, own.count);
    device_->zero(shard, own.count);
  } else if (device_accumulated_ != nullptr) {
    float* sum = device_accumulated_ + own.state_offset;
    device_->residual_forward(shard, shard, sum, own.count);
    device_->zero(sum, own.count);
  }
}

void ZeroReducer::release_unit(int unit) {
  const ParamRange slice = shards_.slice(unit);
  const ShardSpan& own = shards_.owned(unit);
  if (device_ == nullptr) {
    release_outside(grads_, slice.offset, slice.offset + slice.count, own.offset, own.offset + own.count);
    return;
  }
  const std::size_t before = own.offset - slice.offset, after = slice.offset + slice.count - own.offset - own.count;
  if (before > 0) device_->zero(grads_ + slice.offset, before);
  if (after > 0) device_->zero(grads_ + own.offset + own.count, after);
}

std::string ZeroReducer::complete(const Pending& p) {
  std::string failed;
  try {
    wait_collective(p.work, phases_[p.unit]);
    if (reduce_type_ != kernels::Dtype::fp32) widen_owned(p);
  } catch (const std::exception& error) {
    failed = error.what();
  }
  if (release_grads_) release_unit(p.unit);
  return failed;
}

std::string ZeroReducer::retire(bool wait_all) {
  std::string failed;
  std::size_t done = 0;
  while (done < pending_.size() && (wait_all || pending_[done].work->done())) {
    const std::string error = complete(pending_[done]);
    if (failed.empty()) failed = error;
    ++done;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  return failed;
}

void ZeroReducer::finish_backward() {
  if (!in_pass_) throw std::logic_error("ZeroReducer::finish_backward outside a backward pass");
  if (ready_from_ != 0)
    throw std::logic_error("ZeroReducer::finish_backward: gradients [0, " + std::to_string(ready_from_) +
                           ") were never reported ready");
  in_pass_ = false;
  if (!sync_) return;
  const std::string failed = retire(true);
  if (failure_.empty()) failure_ = failed;
  if (!failure_.empty()) throw CommError("ZeRO gradient reduce-scatter failed: " + failure_);
}

}  // namespace dtrain::trainer

#include "trainer/parallel/ddp/reducer.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

std::string range(std::size_t offset, std::size_t count) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset + count) + ")";
}

}  // namespace

DdpReducer::DdpReducer(Communicator& comm, float* grads, std::size_t count, DdpOptions options)
    : comm_(comm),
      grads_(grads),
      count_(count),
      buckets_(cut_buckets(count, options.first_bucket_bytes,
                           options.bucket_bytes.value_or(default_bucket_bytes(count * sizeof(float))))),
      comm_dtype_(options.comm_dtype),
      own_buffers_(options.buffers == nullptr ? std::make_unique<HeapBuffers>() : nullptr),
      buffers_(options.buffers == nullptr ? own_buffers_.get() : options.buffers),
      device_(options.device) {
  if (comm_dtype_ != kernels::Dtype::fp32) half_ = buffers_->allocate_half(count_, "DDP's 16-bit gradient copy");
  phases_ = numbered_phases("allreduce bucket", static_cast<int>(buckets_.size()));
}

DdpReducer::~DdpReducer() {
  // The communicator's thread may still be writing into grads_; it must be done before the buffer can go.
  drain();
  buffers_->release_half(half_);
}

void DdpReducer::begin_backward(bool sync) {
  if (in_pass_) {
    throw std::logic_error("DdpReducer::begin_backward: the previous backward pass was not finished; call "
                           "finish_backward() after every pass (grads ready from offset " +
                           std::to_string(ready_from_) + " of " + std::to_string(count_) + ")");
  }
  in_pass_ = true;
  sync_ = sync;
  ready_from_ = count_;
  next_bucket_ = 0;
  sent_at_begin_ = comm_.bytes_sent();
}

void DdpReducer::grads_ready(std::size_t offset, std::size_t count) {
  if (!in_pass_) {
    throw std::logic_error("DdpReducer::grads_ready" + range(offset, count) +
                           " outside a backward pass; call begin_backward() first");
  }
  if (offset > count_ || count > count_ - offset) {
    throw std::logic_error("DdpReducer::grads_ready" + range(offset, count) + " is outside the gradient buffer of " +
                           std::to_string(count_) + " floats");
  }
  if (offset + count != ready_from_) {
    throw std::logic_error("DdpReducer::grads_ready" + range(offset, count) + ": expected a range ending at " +
                           std::to_string(ready_from_) +
                           " (ranges must arrive in decreasing offset order and cover the buffer exactly once; " +
                           (offset + count > ready_from_ ? "this one overlaps one already reported)"
                                                         : "this one leaves a gap before it)"));
  }
  ready_from_ = offset;
  while (next_bucket_ < buckets_.size() && ready_from_ <= buckets_[next_bucket_].first) {
    if (sync_) start_bucket(next_bucket_);
    ++next_bucket_;
  }
}

void DdpReducer::start_bucket(std::size_t index) {
  const int world = comm_.size();
  auto [offset, count] = buckets_[index];
  if (comm_dtype_ != kernels::Dtype::fp32) {
    std::uint16_t* half = half_ + offset;
    kernels::to_half_divided_on(device_, half, grads_ + offset, count, static_cast<float>(world), comm_dtype_);
    started_.push_back(index);
    if (world > 1) pending_.push_back({index, comm_.allreduce_half(half, count, comm_dtype_)});
    return;
  }
  if (world == 1) return;
  const float scale = 1.0f / static_cast<float>(world);
  float* data = grads_ + offset;
  if (device_ != nullptr) {
    device_->scale(data, count, scale);
  } else {
    for (std::size_t i = 0; i < count; ++i) data[i] *= scale;
  }
  pending_.push_back({index, comm_.allreduce(data, count)});
}

void DdpReducer::cast_back() {
  for (std::size_t index : started_) {
    auto [offset, count] = buckets_[index];
    kernels::from_half_on(device_, grads_ + offset, half_ + offset, count, comm_dtype_);
  }
  started_.clear();
}

std::string DdpReducer::drain() {
  std::string failure;
  for (const Pending& p : pending_) {
    try {
      wait_collective(p.work, phases_[p.bucket]);
    } catch (const std::exception& error) {
      if (failure.empty()) failure = error.what();
    }
  }
  return failure;
}

void DdpReducer::finish_backward() {
  if (!in_pass_) {
    throw std::logic_error("DdpReducer::finish_backward outside a backward pass; call begin_backward() first");
  }
  if (ready_from_ != 0) {
    throw std::logic_error("DdpReducer::finish_backward: gradients [0, " + std::to_string(ready_from_) +
                           ") were never reported ready; backward must call grads_ready for the whole buffer of " +
                           std::to_string(count_) + " floats");
  }
  in_pass_ = false;
  if (!sync_) return;

  const Clock::time_point waiting = Clock::now();
  std::string failure = drain();
  DdpStats stats;
  stats.exposed_ms = std::chrono::duration<double, std::milli>(Clock::now() - waiting).count();
  stats.buckets = buckets_.size();
  stats.bytes_sent = comm_.bytes_sent() - sent_at_begin_;
  for (const Pending& p : pending_) stats.comm_ms += p.work->elapsed_ms();
  pending_.clear();
  stats_ = stats;
  if (!failure.empty()) {
    started_.clear();
    throw CommError("DDP gradient allreduce failed: " + failure);
  }
  cast_back();
}

}  // namespace dtrain::trainer

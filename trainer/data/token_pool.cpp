#include "trainer/data/token_pool.h"

#include <new>

#include "trainer/kernels/backend.h"

namespace dtrain::trainer {

TokenPool::TokenPool(kernels::Backend* backend, std::size_t tokens) : backend_(backend), tokens_(tokens) {}

TokenPool::~TokenPool() {
  for (std::int32_t* slot : all_) {
    if (backend_ != nullptr) {
      backend_->release_host(slot);
    } else {
      ::operator delete(slot);
    }
  }
}

std::int32_t* TokenPool::take() {
  {
    std::lock_guard lock(mutex_);
    // Fences are passed in the order they were recorded, so only the oldest returned slot need be asked.
    if (!returned_.empty()) {
      const auto [slot, fence] = returned_.front();
      if (fence == 0 || backend_ == nullptr || backend_->fence_done(fence)) {
        returned_.pop_front();
        return slot;
      }
    }
  }
  const std::size_t bytes = tokens_ * sizeof(std::int32_t);
  auto* slot = static_cast<std::int32_t*>(backend_ != nullptr ? backend_->allocate_host(bytes)
                                                              : ::operator new(bytes == 0 ? 1 : bytes));
  std::lock_guard lock(mutex_);
  all_.push_back(slot);
  return slot;
}

void TokenPool::give_back(std::int32_t* slot, std::uint64_t fence) {
  std::lock_guard lock(mutex_);
  returned_.emplace_back(slot, fence);
}

std::size_t TokenPool::slots() const {
  std::lock_guard lock(mutex_);
  return all_.size();
}

TokenSlot& TokenSlot::operator=(TokenSlot&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    data_ = other.data_;
    fence_ = other.fence_;
    other.data_ = nullptr;
    other.fence_ = 0;
  }
  return *this;
}

void TokenSlot::reset() {
  if (pool_ && data_ != nullptr) pool_->give_back(data_, fence_);
  pool_.reset();
  data_ = nullptr;
  fence_ = 0;
}

}  // namespace dtrain::trainer

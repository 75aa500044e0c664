#pragma once

// Host memory for the loader's micro-batches, which a device copies from asynchronously (kernels::Backend's
// allocate_host: page-locked on a GPU, so cudaMemcpyAsync reads it without staging). The prefetcher's thread fills
// a slot (take); the training thread's Batch holds it (TokenSlot) and, once the copy from it is queued, hands it
// back with a fence recorded after that copy (free_after); the slot is taken again only when the device has passed
// the fence (Backend::fence_done, asked without waiting). When no slot is free a new one is allocated, so the host
// never waits for the device here: the pool grows to as many slots as the host runs ahead of it. Without a backend
// (tests, tools) slots are plain host memory and free when handed back.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace dtrain::trainer {

namespace kernels {
class Backend;
}

class TokenPool {
 public:
  // Slots of `tokens` ids each; `backend` (null: plain memory) must outlive the pool.
  TokenPool(kernels::Backend* backend, std::size_t tokens);
  // Frees every slot: the device must be done with them (nothing may still copy from one).
  ~TokenPool();
  TokenPool(const TokenPool&) = delete;
  TokenPool& operator=(const TokenPool&) = delete;

  std::size_t tokens() const { return tokens_; }
  // A free slot, or a new one. Any thread.
  std::int32_t* take();
  // `slot` is free once the device has passed `fence` (0: at once). Any thread.
  void give_back(std::int32_t* slot, std::uint64_t fence);
  // Slots allocated so far.
  std::size_t slots() const;

 private:
  kernels::Backend* backend_;
  std::size_t tokens_;
  mutable std::mutex mutex_;
  std::vector<std::int32_t*> all_;
  std::deque<std::pair<std::int32_t*, std::uint64_t>> returned_;  // in the order given back
};

// One slot of a TokenPool, owned: given back when destroyed, free after the fence of free_after() (else at once).
class TokenSlot {
 public:
  TokenSlot() = default;
  TokenSlot(std::shared_ptr<TokenPool> pool, std::int32_t* data) : pool_(std::move(pool)), data_(data) {}
  ~TokenSlot() { reset(); }
  TokenSlot(TokenSlot&& other) noexcept { *this = std::move(other); }
  TokenSlot& operator=(TokenSlot&& other) noexcept;

  std::int32_t* data() const { return data_; }
  std::size_t size() const { return pool_ ? pool_->tokens() : 0; }
  std::vector<std::int32_t> to_vector() const { return {data_, data_ + size()}; }
  // The device reads the slot until `fence` (Backend::record_fence after the copy was queued).
  void free_after(std::uint64_t fence) { fence_ = fence; }

 private:
  void reset();

  std::shared_ptr<TokenPool> pool_;
  std::int32_t* data_ = nullptr;
  std::uint64_t fence_ = 0;
};

}  // namespace dtrain::trainer

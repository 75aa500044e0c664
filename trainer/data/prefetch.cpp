#include "trainer/data/prefetch.h"

#include <utility>

#include "common/os/stop_thread.h"

namespace dtrain::trainer {

Prefetcher::Prefetcher(const DataLoader& loader, std::uint64_t first_step, std::size_t capacity,
                       kernels::Backend* device)
    : loader_(loader),
      capacity_(capacity < 1 ? 1 : capacity),
      pool_(std::make_shared<TokenPool>(device, loader.batch_tokens())) {
  thread_ = std::thread([this, first_step] { run(first_step); });
}

Prefetcher::~Prefetcher() { stop_and_join(mutex_, stop_, changed_, thread_); }

void Prefetcher::run(std::uint64_t first_step) {
  const int micro_steps = loader_.options().grad_accum;
  for (std::uint64_t step = first_step;; ++step) {
    for (int micro = 0; micro < micro_steps; ++micro) {
      Batch batch;
      batch.step = step;
      batch.micro_step = micro;
      try {
        batch.tokens = TokenSlot(pool_, pool_->take());
        loader_.read(step, micro, batch.tokens.data());
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
        changed_.notify_all();
        return;
      }
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || queue_.size() < capacity_; });
      if (stop_) return;
      queue_.push_back(std::move(batch));
      changed_.notify_all();
    }
  }
}

Batch Prefetcher::next() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || error_ != nullptr; });
  // Batches read before a failure are still delivered; the error surfaces at the batch that failed.
  if (queue_.empty()) std::rethrow_exception(error_);
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  changed_.notify_all();
  return batch;
}

}  // namespace dtrain::trainer

#pragma once

// Keeps the next micro-batches ready: a background thread reads them from a DataLoader, in training order
// (step, micro-step 0 .. K-1, next step, ...), into a bounded queue. Reading never runs more than `capacity`
// batches ahead, so memory stays small however slow training is. On a device the batches are read straight into
// page-locked memory (token_pool.h), which the model copies from asynchronously (Gpt::forward_batch).

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "trainer/data/loader.h"
#include "trainer/data/token_pool.h"

namespace dtrain::trainer {

// One rank's micro-batch: tokens holds B*T + 1 ids in a slot of the prefetcher's pool (token_pool.h); inputs are
// tokens[0, B*T), targets tokens[1, B*T + 1).
struct Batch {
  std::uint64_t step = 0;
  int micro_step = 0;
  TokenSlot tokens;

  const std::int32_t* inputs() const { return tokens.data(); }
  const std::int32_t* targets() const { return tokens.data() + 1; }
};

class Prefetcher {
 public:
  // Starts reading at (first_step, micro-step 0), into slots of host memory from `device` (null: plain memory;
  // token_pool.h). The loader and the device must outlive the prefetcher and the batches it gave out.
  Prefetcher(const DataLoader& loader, std::uint64_t first_step, std::size_t capacity = 4,
             kernels::Backend* device = nullptr);
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  // Stops the thread (it may be blocked on a full queue).
  ~Prefetcher();

  // The next batch in training order; blocks until it is read. Rethrows the reader's DataError.
  Batch next();

 private:
  void run(std::uint64_t first_step);

  const DataLoader& loader_;
  std::size_t capacity_;
  std::shared_ptr<TokenPool> pool_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain::trainer

#pragma once

// A Work that another thread finishes: the communicator's queue thread (work_queue.cpp) or the thread that waits for
// a point-to-point message (gloo/p2p.cpp). wait() blocks until finish() and rethrows its error as a CommError.

#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

class FinishableWork : public Work {
 public:
  void wait() override {
    std::unique_lock lock(mutex_);
    finished_cv_.wait(lock, [&] { return finished_; });
    if (!error_.empty()) throw CommError(error_);
  }

  bool done() const override {
    std::lock_guard lock(mutex_);
    return finished_;
  }

  double elapsed_ms() const override {
    std::lock_guard lock(mutex_);
    return elapsed_ms_;
  }

  // Finished (successfully when `error` is empty) after running `elapsed_ms`; wakes wait().
  void finish(std::string error, double elapsed_ms) {
    {
      std::lock_guard lock(mutex_);
      error_ = std::move(error);
      elapsed_ms_ = elapsed_ms;
      finished_ = true;
    }
    finished_cv_.notify_all();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::string error_;
  double elapsed_ms_ = 0;
};

}  // namespace dtrain::trainer

#include "agent/session/lease_watch.h"

#include <spdlog/spdlog.h>

#include "common/stop_thread.h"

namespace dtrain::agent {

LeaseWatch::LeaseWatch(SessionStream& stream, std::chrono::milliseconds lease) : stream_(stream), lease_(lease) {
  thread_ = std::thread([this] { run(); });
}

LeaseWatch::~LeaseWatch() { stop_and_join(mutex_, done_, cv_, thread_); }

void LeaseWatch::heard() {
  std::lock_guard lock(mutex_);
  last_ = std::chrono::steady_clock::now();
}

void LeaseWatch::set_lease(std::chrono::milliseconds lease) {
  std::lock_guard lock(mutex_);
  lease_ = lease;
  cv_.notify_all();
}

bool LeaseWatch::expired() const {
  std::lock_guard lock(mutex_);
  return expired_;
}

void LeaseWatch::run() {
  std::unique_lock lock(mutex_);
  while (!done_) {
    auto deadline = last_ + lease_;
    if (std::chrono::steady_clock::now() >= deadline) {
      expired_ = true;
      spdlog::warn("launcher silent for {} ms (the lease): stopping this node's workers", lease_.count());
      lock.unlock();
      stream_.cancel();
      return;
    }
    cv_.wait_until(lock, deadline, [this] { return done_; });
  }
}

}  // namespace dtrain::agent

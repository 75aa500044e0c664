#include "agent/session/lease_watch.h"

#include <spdlog/spdlog.h>

#include "common/os/stop_thread.h"

namespace dtrain::agent {

LeaseWatch::LeaseWatch(SessionStream& stream, std::chrono::milliseconds lease) : stream_(stream), lease_(lease) {
  thread_ = std::thread([this] { run(); });
}

LeaseWatch::~LeaseWatch() { stop_and_join(mutex_, done_, cv_, thread_); }

void LeaseWatch::heard() {
  std::lock_guard lock(mutex_);
  last_ = lag_.live_now();
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
    // Waits on the steady clock for what is left of the lease on the live one; a stall meanwhile only makes it
    // look again with more left. No predicate: a new lease (set_lease's notify) is taken at once, not after the
    // wait the old one asked for (Configure's lease came into force only once the default 10 s wait ended).
    const auto silent = lag_.live_now() - last_;
    if (silent >= lease_) {
      expired_ = true;
      spdlog::warn("launcher silent for {} ms (the lease) while this agent could run: stopping this node's workers",
                   lease_.count());
      lock.unlock();
      stream_.cancel();
      return;
    }
    cv_.wait_for(lock, lease_ - silent);
  }
}

}  // namespace dtrain::agent

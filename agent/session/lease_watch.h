#pragma once

// Watches a session's lease: if the launcher is silent for longer than the lease, the session is cancelled, which
// makes Agent::serve_session stop the workers. Every blocking wait here has its deadline.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "agent/session/session_stream.h"

namespace dtrain::agent {

class LeaseWatch {
 public:
  LeaseWatch(SessionStream& stream, std::chrono::milliseconds lease);
  ~LeaseWatch();
  LeaseWatch(const LeaseWatch&) = delete;
  LeaseWatch& operator=(const LeaseWatch&) = delete;

  // The launcher was heard from: the lease starts again.
  void heard();
  void set_lease(std::chrono::milliseconds lease);
  // Whether the lease ran out (and the session was cancelled for it).
  bool expired() const;

 private:
  void run();

  SessionStream& stream_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::chrono::milliseconds lease_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  bool done_ = false;
  bool expired_ = false;
  std::thread thread_;
};

}  // namespace dtrain::agent

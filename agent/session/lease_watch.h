#pragma once

// Watches a session's lease: if the launcher is silent for longer than the lease, the session is cancelled, which
// makes Agent::serve_session stop the workers. Silence counts only while this agent could run (LoopLag's live
// clock): an agent stopped (SIGSTOP) or starved for less than its lease finds, when it resumes, the launcher's
// messages that waited meanwhile and keeps its workers; a launcher that really is silent still costs the workers
// after one lease of this agent's own running time. Every blocking wait here has its deadline.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "agent/session/session_stream.h"
#include "common/os/loop_lag.h"

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
  LoopLag lag_;   // before last_, which starts on its clock
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::chrono::milliseconds lease_;
  LoopLag::Clock::time_point last_ = lag_.live_now();   // on the live clock
  bool done_ = false;
  bool expired_ = false;
  std::thread thread_;
};

}  // namespace dtrain::agent

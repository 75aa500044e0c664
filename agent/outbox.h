#pragma once

// The agent's outgoing half of a session: a queue drained by one writer thread, so the supervisor's event loop
// never blocks on the network. Consecutive log lines are merged into one message (bounded in size), and a
// heartbeat goes out whenever the session has been quiet for the heartbeat interval.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "agent/session_stream.h"

namespace dtrain::agent {

class Outbox {
 public:
  Outbox(SessionStream& stream, std::chrono::milliseconds heartbeat_interval);
  ~Outbox();  // flushes what is queued (while the stream takes it), then joins the writer
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  void push(v1::AgentMessage message);
  void set_heartbeat_interval(std::chrono::milliseconds interval);
  // Blocks until everything pushed so far was written (or the stream broke), at most `timeout`.
  void flush(std::chrono::milliseconds timeout);
  bool broken() const;

 private:
  void run();

  SessionStream& stream_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<v1::AgentMessage> queue_;
  std::chrono::milliseconds heartbeat_interval_;
  bool in_flight_ = false;
  bool closing_ = false;
  bool broken_ = false;
  std::thread writer_;
};

}  // namespace dtrain::agent

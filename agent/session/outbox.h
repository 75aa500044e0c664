#pragma once

// The agent's outgoing half of a session: a queue drained by one writer thread, so the supervisor's event loop
// never blocks on the network. Consecutive log lines are merged into one message (bounded in size), and a
// heartbeat goes out whenever the session has been quiet for the heartbeat interval. Console lines are bounded: when
// more than kMaxQueuedLogBytes of them wait (a worker printing faster than the network carries), further lines
// are dropped from the console stream (they are still in the rank's log file) and a note says how many.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "agent/session/session_stream.h"

namespace dtrain::agent {

class Outbox {
 public:
  static constexpr std::size_t kMaxQueuedLogBytes = 16 << 20;
  // A single write that blocks longer than this (the launcher stopped reading) cancels the session.
  static constexpr std::chrono::milliseconds kWriteStallTimeout{30000};

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
  std::size_t queued_log_bytes_ = 0;
  std::uint64_t dropped_lines_ = 0;     // console lines dropped since the last note
  std::uint32_t dropped_round_ = 0;
  bool in_flight_ = false;
  bool closing_ = false;
  bool broken_ = false;
  std::thread writer_;
};

}  // namespace dtrain::agent

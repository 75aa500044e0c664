#pragma once

// Everything the launcher reacts to arrives here, from the session reader threads, the local agents' supervisor
// and the signal thread; the controller consumes it on one thread, so job state needs no locks.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "dtrain/v1/session.pb.h"

namespace dtrain::controller {

struct Event {
  enum class Kind {
    message,          // `message` from node `node`'s agent
    session_closed,   // node `node`'s session stream ended (read failed); finish() gives the status
    agent_line,       // a local agent process printed `text` (stdout when !is_stderr)
    agent_exited,     // a local agent process exited; `text` says how
    signal,           // the launcher received `signal`
    joined,           // an agent dialed in (provider join) and became node id `node`; `text` is its peer address
  };
  Kind kind = Kind::message;
  int node = -1;
  v1::AgentMessage message;
  std::string text;
  bool is_stderr = false;
  int signal = 0;
};

class EventQueue {
 public:
  void push(Event event) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    }
    cv_.notify_one();
  }

  // The next event, or nothing once `deadline` passed.
  std::optional<Event> pop(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_until(lock, deadline, [this] { return !events_.empty(); })) return std::nullopt;
    Event event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

// Turns every AgentMessage read from one session stream (client or server side, whichever dialed) into an Event
// for `node`, then one session_closed once the stream ends. Runs on the stream's reader thread.
// `on_message` runs before each message is queued (may be empty).
template <class Stream, class OnMessage>
void pump_session(Stream& stream, int node, EventQueue& events, OnMessage on_message) {
  v1::AgentMessage message;
  while (stream.Read(&message)) {
    on_message();
    Event event;
    event.kind = Event::Kind::message;
    event.node = node;
    event.message = std::move(message);
    events.push(std::move(event));
    message = v1::AgentMessage();
  }
  Event closed;
  closed.kind = Event::Kind::session_closed;
  closed.node = node;
  events.push(std::move(closed));
}

}  // namespace dtrain::controller

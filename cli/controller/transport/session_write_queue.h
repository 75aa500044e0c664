#pragma once

// What the launcher has yet to write to one agent session, in order, with at most one write in flight.
//
// The launcher's event loop must never wait on one agent: a send puts the message here and returns, and the
// transport writes the front message whenever the previous write completed. An agent that stops reading its stream
// (HTTP/2 flow control then holds the write in flight) makes the queue grow and its front message age; either
// bound gives the session up, instead of the loop that serves every other agent.
//
// Not thread-safe: the session that owns it serialises every call under its own lock.

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <utility>

namespace dtrain::controller {

template <class Message>
class SessionWriteQueue {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Push {
    start_write,   // queued, and no write was in flight: the caller starts writing front() now
    queued,        // queued behind the write in flight; written() hands it out in turn
    full,          // refused: max_messages are already waiting (the agent does not read)
    stalled,       // refused: the front message has waited longer than the stall timeout (the agent does not read)
  };

  SessionWriteQueue(std::size_t max_messages, std::chrono::milliseconds stall_timeout)
      : max_messages_(max_messages), stall_timeout_(stall_timeout) {}

  Push push(Message message, Clock::time_point now) {
    if (stalled(now)) return Push::stalled;
    if (queue_.size() >= max_messages_) return Push::full;
    queue_.push_back({std::move(message), now});
    if (writing_) return Push::queued;
    writing_ = true;
    return Push::start_write;
  }

  // The message being written; stays valid (and in place) until written().
  Message& front() { return queue_.front().message; }

  // The write in flight completed: true when the next one is to be started with front().
  bool written() {
    queue_.pop_front();
    writing_ = !queue_.empty();
    return writing_;
  }

  // Drops every message not yet handed to the transport (the session is ending); the one in flight stays.
  void drop_waiting() {
    if (queue_.size() > 1) queue_.erase(queue_.begin() + 1, queue_.end());
  }

  // Why a session is given up after push() refused with `push` (full or stalled), for the node-lost message.
  std::string refusal(Push push) const {
    if (push == Push::full) {
      return "its agent did not read its stream: " + std::to_string(max_messages_) +
             " messages waited for it (is the agent process stopped, or its host overloaded?)";
    }
    return "its agent did not read its stream for " + std::to_string(stall_timeout_.count()) +
           " ms (is the agent process stopped, or its host overloaded?)";
  }

  bool writing() const { return writing_; }
  std::size_t size() const { return queue_.size(); }
  // The oldest message has waited longer than the stall timeout.
  bool stalled(Clock::time_point now) const {
    return !queue_.empty() && now - queue_.front().queued_at > stall_timeout_;
  }

 private:
  struct Entry {
    Message message;
    Clock::time_point queued_at;
  };

  std::size_t max_messages_;
  std::chrono::milliseconds stall_timeout_;
  std::deque<Entry> queue_;   // deque: front() stays in place while later messages are pushed
  bool writing_ = false;
};

}  // namespace dtrain::controller

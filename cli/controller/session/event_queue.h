#pragma once

// Everything the launcher reacts to arrives here, from the session reader threads, the local agents' supervisor
// and the signal thread; the controller consumes it on one thread, so job state needs no locks.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/controller/session/session_messages.h"

namespace dtrain::controller {

struct Event {
  enum class Kind {
    report,           // `report` from node `node`'s agent
    session_closed,   // node `node`'s session stream ended (read failed); finish() gives the status
    agent_line,       // an agent process the launcher started (local, ssh, srun) printed `text`
    agent_exited,     // an agent process the launcher started exited; `text` says how
    signal,           // the launcher received `signal`
    joined,           // an agent dialed in (provider join) and became node id `node`; `text` is its peer address
  };
  Kind kind = Kind::report;
  int node = -1;
  AgentReport report;
  std::string text;
  bool is_stderr = false;
  int signal = 0;
  // report: when the agent wrote the message that carried it (its wall clock; 0 when it did not say, and on all but
  // the first report of a batch): ReadLag's sample.
  std::uint64_t sent_unix_ms = 0;
};

// A ring of Events that grows by doubling and is reused: an Event is a few hundred bytes, so a std::deque (512-byte
// blocks) allocated one block per event, and at 4,096 agents the queue carries tens of thousands of reports a second.
// Once it has grown to the backlog's size, a report costs the queue no allocation. It shrinks back when it empties
// after a backlog of more than kShrinkAbove events (a join storm's), so a burst's memory is not held for the job.
class EventQueue {
 public:
  static constexpr std::size_t kInitialSlots = 256;
  static constexpr std::size_t kShrinkAbove = 1 << 16;

  void push(Event event) {
    {
      std::lock_guard lock(mutex_);
      put(std::move(event));
    }
    cv_.notify_one();
  }
  // Several events in order, under one lock and with one wake-up: an agent's batch of reports (thousands of agents
  // each sending one a second) wakes the fleet's thread once, not once per report.
  void push_all(std::vector<Event>& events) {
    if (events.empty()) return;
    {
      std::lock_guard lock(mutex_);
      for (auto& e : events) put(std::move(e));
    }
    events.clear();
    cv_.notify_one();
  }

  // After waking for an empty queue's first event, the consumer lets this much time pass before it takes it, so what
  // arrives meanwhile is taken in the same turn: thousands of agents' messages spread over each second would
  // otherwise wake it once each (a context switch apiece, a fifth of the launcher's CPU at 4,096 agents). Nothing
  // the launcher does is that urgent at that size. A small job does not gather (set_gather(0)): its start is a chain
  // of a dozen exchanges with its agents (hello, configure, the round, the workers' starts and exits, the stop), and
  // 2 ms at each was a fifth of `dtrain run -n 8 -- /bin/true` (BENCHMARKS.md, "Launch in 0.1 s").
  static constexpr std::chrono::milliseconds kGather{2};
  // From the consumer's thread (the fleet's), like pop().
  void set_gather(std::chrono::milliseconds gather) { gather_ = gather; }

  // The next event, or nothing once `deadline` passed.
  std::optional<Event> pop(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (size_ == 0) {
      if (!cv_.wait_until(lock, deadline, [this] { return size_ != 0; })) return std::nullopt;
      if (gather_.count() > 0) {
        lock.unlock();
        std::this_thread::sleep_for(gather_);
        lock.lock();
      }
    }
    std::optional<Event> event(std::move(ring_[head_]));
    head_ = (head_ + 1) % ring_.size();
    if (--size_ == 0 && ring_.size() > kShrinkAbove) {
      ring_ = std::vector<Event>(kInitialSlots);
      head_ = 0;
    }
    return event;
  }

  // Slots held now (tests: the ring is reused, and shrinks after a burst).
  std::size_t capacity() {
    std::lock_guard lock(mutex_);
    return ring_.size();
  }

 private:
  // With mutex_ held.
  void put(Event&& event) {
    if (size_ == ring_.size()) grow();
    ring_[(head_ + size_) % ring_.size()] = std::move(event);
    ++size_;
  }
  void grow() {
    std::vector<Event> bigger(std::max(kInitialSlots, ring_.size() * 2));
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
    ring_ = std::move(bigger);
    head_ = 0;
  }

  std::mutex mutex_;
  std::chrono::milliseconds gather_ = kGather;   // read and set by the consumer's thread only
  std::condition_variable cv_;
  std::vector<Event> ring_;
  std::size_t head_ = 0;   // the oldest event's slot
  std::size_t size_ = 0;   // events queued
};

}  // namespace dtrain::controller

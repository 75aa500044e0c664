#pragma once

// Everything the launcher reacts to arrives here, from the session reader threads, the local agents' supervisor
// and the signal thread; the controller consumes it on one thread, so job state needs no locks.

#include <chrono>
#include <condition_variable>
#include <deque>
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

class EventQueue {
 public:
  void push(Event event) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    }
    cv_.notify_one();
  }
  // Several events in order, under one lock and with one wake-up: an agent's batch of reports (thousands of agents
  // each sending one a second) wakes the fleet's thread once, not once per report.
  void push_all(std::vector<Event>& events) {
    if (events.empty()) return;
    {
      std::lock_guard lock(mutex_);
      for (auto& e : events) events_.push_back(std::move(e));
    }
    events.clear();
    cv_.notify_one();
  }

  // After waking for an empty queue's first event, the consumer lets this much time pass before it takes it, so what
  // arrives meanwhile is taken in the same turn: thousands of agents' messages spread over each second would
  // otherwise wake it once each (a context switch apiece, a fifth of the launcher's CPU at 4,096 agents). Nothing
  // the launcher does is that urgent.
  static constexpr std::chrono::milliseconds kGather{2};

  // The next event, or nothing once `deadline` passed.
  std::optional<Event> pop(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (events_.empty()) {
      if (!cv_.wait_until(lock, deadline, [this] { return !events_.empty(); })) return std::nullopt;
      lock.unlock();
      std::this_thread::sleep_for(kGather);
      lock.lock();
    }
    Event event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

}  // namespace dtrain::controller

#pragma once

// The agent's outgoing half of a session: a queue drained by one writer thread, so the supervisor's event loop
// never blocks on the network. Consecutive log lines are merged into one message (bounded in size), and a
// heartbeat goes out whenever the session has been quiet for the heartbeat interval. Console lines are bounded: when
// more than kMaxQueuedLogBytes of them wait (a worker printing faster than the network carries), further lines
// are dropped from the console stream (they are still in the rank's log file) and a note says how many.
//
// Worker health reports are coalesced (push_report): the outbox keeps each rank's latest and sends them together, one
// write per node per report window (StartGroup.report_window_ms, the job's DTRAIN_HEALTH_INTERVAL_MS), or sooner
// with whatever else the agent sends. A report that replaces an unsent one of its rank replaces its values: the
// reports carry the last step's values, so the launcher sees each rank's latest every window, as it would from a
// worker reporting once a window. Its per-step points are merged instead (carry_points), so the window's shape
// survives: the unsent report's points, then the new one's, thinned to kMaxStepPoints keeping the first, the last
// and the lowest and highest loss of even groups between (common/report/step_points.h). What the launcher must see at once goes at once: a rank's first report of the
// round (the start-up check), its first counted step, a report after its step count went back (a restart), one
// that says `quiet` (its heartbeats stop next), and its last one (`exiting`). A window of 0 sends every report as it
// arrives.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "agent/session/session_stream.h"

namespace dtrain::agent {

// `newer` (a WorkerHealth replacing the unsent `unsent` of its rank) with `unsent`'s points before its own, merged
// and thinned as the header says.
void carry_points(const v1::AgentMessage& unsent, v1::AgentMessage& newer);

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
  // `message` holds one WorkerHealth: coalesced as the header says.
  void push_report(v1::AgentMessage message);
  // A new round's window (StartGroup): what each rank reported before is forgotten, so its first report goes at once.
  void set_report_window(std::chrono::milliseconds window);
  void set_heartbeat_interval(std::chrono::milliseconds interval);
  // Blocks until everything pushed so far was written (or the stream broke), at most `timeout`.
  void flush(std::chrono::milliseconds timeout);
  bool broken() const;

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  // Waits until there is something to write: true for the queue or due reports, false for a heartbeat (the session
  // was quiet for the interval). Returns with `closing_` set when the outbox closes.
  bool wait_for_work(std::unique_lock<std::mutex>& lock);
  bool reports_due(Clock::time_point now) const { return !reports_.empty() && now >= reports_due_; }

  SessionStream& stream_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<v1::AgentMessage> queue_;
  std::chrono::milliseconds heartbeat_interval_;
  std::chrono::milliseconds report_window_{0};
  std::map<std::uint32_t, v1::AgentMessage> reports_;             // each rank's latest unsent report, by rank
  Clock::time_point reports_due_{};                                  // when the unsent reports must go
  std::unordered_map<std::uint32_t, std::uint64_t> steps_forwarded_;  // the steps_done each rank last sent
  Clock::time_point last_write_ = Clock::now();
  std::size_t queued_log_bytes_ = 0;
  std::uint64_t dropped_lines_ = 0;     // console lines dropped since the last note
  std::uint32_t dropped_round_ = 0;
  bool in_flight_ = false;
  bool closing_ = false;
  bool broken_ = false;
  std::thread writer_;
};

}  // namespace dtrain::agent

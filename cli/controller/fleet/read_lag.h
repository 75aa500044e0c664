#pragma once

// How far behind the launcher reads its agents' messages, measured on the messages themselves.
//
// LoopLag (common/os/loop_lag.h) sees a launcher that could not run at all (stopped, or starved for longer than its
// ticker's slack). It does not see one that runs but reads late: during a join storm gRPC's threads spend seconds on
// TLS handshakes while established sessions' heartbeats wait unread in socket buffers, and on a machine shared with
// CPU-bound work the launcher gets a third of a core. (The 593 nodes that a 1,024-agent join beside 4 CPU-bound
// processes lost for silence turned out to be the simulator's own silence; BENCHMARKS.md, "Joins under load".)
//
// Every agent message carries its wall-clock send time (AgentMessage.sent_unix_ms, stamped as it is written; an
// older agent stamps its heartbeats alone). Its transit, the launcher's wall clock when the fleet applies it less
// that time, is the network plus the launcher's own backlog (socket buffers, gRPC's threads, the event queue). Two
// hosts' clocks differ by an offset, so each node's transit counts from the least it has been (its floor): what is
// left is how late this message was read compared with that node's best. The launcher's backlog delays every node's
// messages alike, one slow agent or link only its own: each second of samples gives one lag, their lower median, and
// the read lag is the largest of the last `horizon` (the node timeout) of them, so a backlog that is being worked off
// still counts for as long as a deadline it delayed can be pending.
//
// Silence deadlines move by lag() (fleet/fleet_pump.cpp), at most by one node timeout: a node that really is
// silent while every other is read on time is still given up at its deadline, and one that is silent while the
// launcher is behind is given up at most one node timeout later than that.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace dtrain::controller {

class ReadLag {
 public:
  using Clock = std::chrono::steady_clock;
  // One lag per this much time of samples.
  static constexpr std::chrono::milliseconds kWindow{1000};

  // `horizon`: how long a second's lag is remembered; the lag returned is also at most that.
  explicit ReadLag(std::chrono::milliseconds horizon) : horizon_(horizon) {}

  // Node `node`'s message sent at `sent_unix_ms` (its clock) was applied at `applied_unix_ms` (the launcher's),
  // `now` on the live clock. A sent time of 0 (a message that does not say) is no sample. Returns the
  // lag of the second this sample closed, if it closed one (once a second at most: for saying so when it is large).
  std::optional<std::chrono::milliseconds> sample(int node, std::uint64_t sent_unix_ms, std::uint64_t applied_unix_ms,
                                                  Clock::time_point now);
  // The largest per-second median of the last `horizon`, the current second's included; at most `horizon`.
  std::chrono::milliseconds lag(Clock::time_point now);

 private:
  struct Second {
    Clock::time_point end;
    std::chrono::milliseconds lag;
  };
  // Closes the current window if `now` is past its end; returns its lag if it had samples.
  std::optional<std::chrono::milliseconds> roll(Clock::time_point now);

  std::chrono::milliseconds horizon_;
  std::vector<std::int64_t> floors_;       // by node: its least transit so far (kNoFloor: none yet)
  std::vector<std::int64_t> current_;      // the current window's lateness samples (ms)
  Clock::time_point window_end_{};
  std::deque<Second> seconds_;             // closed windows within the horizon, oldest first
};

}  // namespace dtrain::controller

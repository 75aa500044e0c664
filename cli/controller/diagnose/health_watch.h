#pragma once

// The launcher's health checks of one round's workers, on the fleet's clock (so tests script the time):
//
//   heartbeat  health.heartbeat_timeout_s  a worker that reported once and then sent nothing this long: its
//                                          process is stopped or wedged (reporters resend the latest report every
//                                          DTRAIN_HEALTH_INTERVAL_MS, so a slow step still heartbeats); not while
//                                          its latest report says `quiet` (below)
//   hang       health.hang_timeout_s       a worker whose step did not move this long, from its first step on
//   startup    health.startup_timeout_s    a worker that reported but made no first step this long after it
//                                          started (imports, data, communicator init)
//   teardown   health.exit_timeout_s       a worker whose report said `exiting` (below) and whose exit did not
//                                          come this long after that report: stuck in teardown
//
// A worker has made a step when a report's steps_done is above 0 or its step differs from its first report's (a
// reporter without steps_done); progress is any later change of (step, steps_done). Workers that never report
// are not checked (a script that does not use the reports); workers that exited are not checked. 0 turns a check
// off. Every input is O(1); check() and next_deadline() look at every worker, once per wake-up of the round.
//
// A worker whose report says `exiting` (its last report: the process finished its work, normally or on SIGTERM) is
// not checked by heartbeat, hang or start-up from then on. What follows that report is teardown (a PyTorch
// process's gloo or NCCL groups and DDP reducers, the interpreter's finalization, which stops the reporter's thread),
// measured at 0.4 to 3 s and more: its heartbeats stop there, and a rank that trained to the end must not fail as
// "stopped reporting health" for it, nor get its peers' stacks asked for while they tear down too. The round still
// judges its exit as any worker's (a non-zero code or a signal is a failure). One check stays armed instead: the
// teardown check, due health.exit_timeout_s after the first such report, so that a process that never exits (torch
// 1.13 can deadlock at exit, a gloo thread waiting for the GIL) fails the round, its stacks collected like a hang's,
// rather than leaving a job whose other ranks all finished waiting for ever. A later report of that process (its
// reporter's thread runs until finalization stops it) re-arms nothing and does not move that deadline.
//
// A report that says `quiet` was sent as its process entered a call that keeps its reporter from running until it
// returns (a Python reporter's thread needs the interpreter lock, and torch 1.13's init_process_group holds it for as
// long as it waits for late peers). Its silence after that report is not a stopped process: the heartbeat check is
// off for the worker until a report without `quiet` comes. The start-up check (no first step yet) and the hang check
// still apply, so a call that never returns still fails the round. Two checks bound quiet itself, since a rank past
// its first step with hang_timeout_s 0 (the default) would otherwise never be judged again:
//   quiet      health.startup_timeout_s    quiet this long since the report that said so (1,800 s, torch's default
//                                          process-group timeout, after which its init_process_group gives up too,
//                                          when the start-up check is off)
//   stopped    health.heartbeat_timeout_s  quiet, and its agent's samples (/proc, every second) have shown its
//                                          process stopped (state T or t: SIGSTOP, a tracer) this long. A wait for a
//                                          late peer sleeps (state S) and is not judged by this
//   idle       health.heartbeat_timeout_s  quiet, and its agent's samples have shown no CPU time used by any of its
//              (10 s at least)             threads this long: a deadlock. A wait for a late peer polls, and uses
//                                          some: measured with torch 1.13, a rank waiting for a late store server
//                                          used a 10 ms tick every 2-4 s, the server waiting for its clients more

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "cli/controller/session/session_messages.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

// A failed check: which worker, and what happened to it, to follow "rank 5 " ("stopped reporting health 30.0 s
// ago ...").
struct HealthFailure {
  enum class Check { heartbeat, hang, startup, teardown, quiet, stopped, idle };
  Check check = Check::heartbeat;
  unsigned rank = 0;
  std::string what;
};

class HealthWatch {
 public:
  using Clock = std::chrono::steady_clock;

  explicit HealthWatch(const spec::Spec::Health& limits);

  void started(unsigned rank, Clock::time_point now);
  // A report with `exiting` set ends the heartbeat, hang and start-up checks of its worker and arms its teardown
  // check (see above).
  void reported(const WorkerHealth& health, Clock::time_point now);
  void exited(unsigned rank);
  // Its agent's look at the worker's process (/proc): feeds the `stopped` and `idle` checks of a quiet worker.
  void sampled(unsigned rank, char state, double cpu_seconds, Clock::time_point now);

  // The check that failed first by `now` (the earliest deadline), if any did.
  std::optional<HealthFailure> check(Clock::time_point now) const;
  // When the next check falls due (time_point::max() when none is armed). From then on due_sooner() tells whether
  // a start or a report armed a check that falls due before that time: the round's wait must end early then.
  Clock::time_point next_deadline();
  bool due_sooner() const { return due_sooner_; }

 private:
  struct Worker {
    bool exited = false;
    // When it sent its last report (`exiting`): only the teardown check from then on; its exit is judged alone.
    std::optional<Clock::time_point> exiting_since;
    Clock::time_point started_at;
    std::optional<Clock::time_point> last_report;
    bool quiet = false;                         // its latest report said `quiet`: no heartbeat check
    std::optional<Clock::time_point> quiet_since;    // when its reports began to say `quiet`
    std::optional<Clock::time_point> stopped_since;  // since when its agent's samples show it stopped (T, t)
    double cpu_seconds = -1;                         // its CPU time in the last sample (-1: none yet)
    std::optional<Clock::time_point> cpu_moved_at;   // the sample at which that CPU time was first seen
    std::uint64_t first_step = 0;               // the step of its first report
    std::uint64_t step = 0;
    std::uint64_t steps_done = 0;
    std::optional<Clock::time_point> progress_at;   // its last progress; set from its first step on
  };
  struct Due {
    Clock::time_point at;
    HealthFailure::Check check;
  };

  Worker& worker(unsigned rank, Clock::time_point now);
  // The earliest armed check of `w`, if one is.
  std::optional<Due> due(const Worker& w) const;
  void note_due(const Worker& w);
  std::string describe(const Due& due, const Worker& w, Clock::time_point now) const;

  std::chrono::milliseconds heartbeat_, hang_, startup_, exit_;   // 0 = off
  std::chrono::milliseconds quiet_limit_;                    // the `quiet` check's bound (never off)
  std::map<unsigned, Worker> workers_;                       // by rank
  Clock::time_point promised_ = Clock::time_point::max();  // what next_deadline() last answered
  bool due_sooner_ = false;
};

}  // namespace dtrain::controller

#pragma once

// One simulated agent of dtrain-fleet-sim: a real LauncherService.Join session (gRPC's callback API, so thousands
// of them share gRPC's few threads) that answers as `dtrain agent --join` does, with no processes behind it:
//
//   open      Hello (facts of a one-agent machine with `cpus` CPUs)
//   Configure           -> heartbeats every heartbeat_interval_ms from then on; the lease is armed
//   PrepareRound        -> RoundPrepared
//   StartGroup          -> WorkerStarted per worker; run_ms later WorkerExited (exit_code, or fail_code for
//                          fail_rank) per worker, then GroupDone
//   StopGroup           -> WorkerExited (stopped_by_agent) for each worker still running, GroupStopped
//   CollectEvidence     -> Evidence with no stacks
//   Shutdown            -> Goodbye, then the session is ended from this side
//   launcher silent for lease_ms -> its workers stop by themselves (WorkerExited, SIGTERM), as an agent's do
//
//   with report_hz R: every running worker reports R times a second as dtrain-trainer does (one step per report:
//                          step, step_ms, data wait, compute, exposed communication, optimizer, loss, tokens/s,
//                          rss), coalesced as an agent's Outbox coalesces them: one write of every worker's latest
//                          per StartGroup.report_window_ms (or per 1/R s, whichever is longer), the first at once.
//                          The straggler rank's steps take twice as long, 60% of them data wait.
//
// Faults: drop (cut the session, or go silent so that only the launcher's node timeout can tell) drop_after_ms
// after StartGroup; stall: stop reading the stream after Configure (the launcher's writes to it then back up)
// while still writing heartbeats and reports.
//
// Time-driven work (heartbeats, exits, drops, the lease) happens in tick(), which the simulator calls for every
// agent from one thread every few milliseconds; everything else runs in gRPC's callbacks.

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::fleet_sim {

using Clock = std::chrono::steady_clock;

enum class Drop { none, cut, silent };

struct AgentOptions {
  int index = 0;                       // names the agent: host sim-<index>
  unsigned cpus = 8;                   // CPUs its hello reports
  std::chrono::milliseconds run{1000}; // how long its workers "run" after StartGroup
  int exit_code = 0;                   // every worker's exit code ...
  int fail_rank = -1;                  // ... except this rank's (-1: none), which exits with fail_code
  int fail_code = 1;
  Drop drop = Drop::none;              // what happens drop_after after StartGroup
  std::chrono::milliseconds drop_after{0};
  bool stall = false;                  // stop reading after Configure
  bool batch = true;                   // send what waits in one write, as an agent does (false: one by one)
  double report_hz = 0;                // health reports per worker per second (0: none)
  int straggler_rank = -1;             // this rank's steps take twice as long (-1: none)
};

// What the agent saw, on the simulator's clock (nullopt: never happened).
struct AgentTimes {
  std::optional<Clock::time_point> configured, started, exited, dropped, closed;
  std::optional<Clock::time_point> reported;      // its workers' first reports went out
  std::uint64_t reports = 0;                      // worker reports sent
  std::chrono::milliseconds max_launcher_gap{0};  // longest silence of the launcher after Configure
  // Longest time it sent nothing, less its heartbeat interval: how late this process was with a heartbeat (a
  // starved simulator is a silent agent, whatever the launcher does).
  std::chrono::milliseconds max_heartbeat_late{0};
  // Longest time from a message's send() to the end of the write that carried it: how long this process's own
  // gRPC threads kept what it had to say.
  std::chrono::milliseconds max_write_delay{0};
  bool lease_lost = false;                        // the launcher was silent longer than the lease
  bool goodbye = false;                           // the launcher ended the session with Shutdown
  std::string end;                                // how the stream ended, for the report
};

class SimAgent final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::LauncherMessage> {
 public:
  SimAgent(AgentOptions options, std::shared_ptr<grpc::Channel> channel);

  // Bits of progress(): what the agent has got to so far.
  static constexpr int kConfigured = 1, kStarted = 2, kExited = 4, kClosed = 8;

  // Opens the session and sends Hello.
  void start();
  const AgentOptions& options() const { return options_; }
  int progress() const;
  // Time-driven work due by `now` (see the header comment). Called from one thread.
  void tick(Clock::time_point now);
  // Ends the session from this side (a cut, a lost lease, or the simulator giving up at its deadline). Writes
  // nothing more; a stalled agent, which has no read pending to fail, is done once its write in flight is.
  void cancel();
  bool closed() const;
  AgentTimes times() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  struct Worker {
    std::uint32_t rank = 0;
    bool exited = false;
  };

  void handle(const v1::LauncherMessage& message, Clock::time_point now);
  void on_start_group(const v1::StartGroup& start, Clock::time_point now);
  void on_stop_group(const v1::StopGroup& stop);
  // Every still-running worker exits with `code` (or `signal`); then GroupDone unless the agent stopped them.
  void exit_workers(int code, int signal, bool stopped_by_agent);
  void send(v1::AgentMessage message);
  // Every running worker's report as of `now`, in one Batch.
  void send_reports(Clock::time_point now);
  void write_next();            // mutex_ held; starts the next queued write unless one is in flight
  // mutex_ held: whether to drop the hold that keeps OnDone away (the stream ended and no write is in flight);
  // the caller calls RemoveHold() after unlocking.
  bool release_if_idle();

  AgentOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LauncherService::Stub> stub_;
  grpc::ClientContext context_;
  v1::LauncherMessage incoming_;

  mutable std::mutex mutex_;
  std::deque<v1::AgentMessage> outbox_;
  v1::AgentMessage writing_message_;   // the write in flight, taken from outbox_
  bool writing_ = false;
  bool ended_ = false;          // the read side ended: no more writes start
  bool held_ = true;            // the hold that keeps OnDone away while writes may still start
  bool done_ = false;           // OnDone ran
  bool silent_ = false;         // dropped silently: writes nothing more
  bool cancel_after_write_ = false;   // Goodbye queued: end the session once it is written
  std::chrono::milliseconds heartbeat_{0};
  std::chrono::milliseconds lease_{0};
  Clock::time_point last_heard_;
  Clock::time_point last_sent_;   // anything, from Configure on: a heartbeat is due an interval after it
  std::optional<Clock::time_point> oldest_queued_;   // when the oldest message in outbox_ was queued
  Clock::time_point writing_since_;                  // when the oldest message in the write in flight was queued
  std::uint32_t round_ = 0;
  std::vector<Worker> workers_;
  std::optional<Clock::time_point> exit_at_;
  std::optional<Clock::time_point> drop_at_;
  std::optional<Clock::time_point> next_report_;
  std::chrono::microseconds report_every_{0};
  AgentTimes times_;
};

}  // namespace dtrain::fleet_sim

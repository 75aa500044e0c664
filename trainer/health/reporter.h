#pragma once

// Health reports from a worker to its node's agent (WorkerReports.Report at DTRAIN_AGENT_ADDR, with this round's
// DTRAIN_JOB_TOKEN and this worker's own DTRAIN_REPORT_TOKEN, which the agent requires of a report for this rank;
// the call itself is worker/report/report_client.h's) after every step: step, loss, tokens/s, resident memory, where
// the step's time went (a pipeline stage's bubble among it), the --metrics memory and traffic, the rank's place in
// the --tp x --pp grid, and the phase the worker is in (phase.h).
// The agent refuses values that cannot be real (a loss that is not finite, say: agent/service/report_service.h).
// Training never waits for it: report() only stores the newest values and a background thread sends them, each
// call with a short deadline; values that arrive while a call is in flight replace each other (the agent wants the
// latest, not a history), except for their per-step points: each report carries the points of every step since the
// previous send ({step, loss, step_ms, tokens_per_s}; at most kMaxStepPoints, thinned as common/report/step_points.h
// says), so the report page draws a curve a point per step; a heartbeat carries none. A failed report is logged
// once (then every 100th), and training goes on; its points are not sent again.
//
// The reports are also the launcher's sign of life from inside the worker (health.heartbeat_timeout_s): the thread
// sends one as the reporter starts (step 0, no step done yet), and resends the latest every `interval` while no new
// one comes (DTRAIN_HEALTH_INTERVAL_MS, from the launcher), so a slow step is not taken for a stopped process. Each
// report carries how many steps this process completed (steps_done: the report() calls so far), from which the
// launcher tells progress (health.hang_timeout_s) from heartbeats, and a start-up (health.startup_timeout_s) from a
// resumed run's start at step N.
// With DTRAIN_TLS_CA set (a cluster that uses TLS) the channel is mutual TLS with the worker certificate in
// DTRAIN_TLS_CERT/KEY (no cluster token), as the store client does.
// The variables are read as every other the trainer reads (trainer/common/env.h): unset gives the default, a value
// that is not what it should be stops the worker with an error naming it (exit code 2), never a silent fallback.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "worker/report/report_client.h"

namespace dtrain::trainer {

// One completed step, as report.proto's WorkerReport says (0: not known). The phase is not here: the reporter reads
// it (phase.h) as it sends each report, heartbeats included.
using HealthReport = worker::HealthReport;

struct HealthReporterOptions {
  std::string address;                         // the agent's WorkerReports server (host:port)
  std::string token;                           // this round's job token
  std::string report_token;                    // this worker's DTRAIN_REPORT_TOKEN
  std::uint32_t rank = 0;                      // RANK: the start-up report's
  std::chrono::milliseconds deadline{2'000};   // per report call
  // Resend the latest report this often while no new one comes (DTRAIN_HEALTH_INTERVAL_MS). 1 s without the
  // variable, the longest interval a launcher gives (several heartbeats fit in any heartbeat timeout of 5 s or more).
  std::chrono::milliseconds interval{1'000};
};

class HealthReporter {
 public:
  // Null when DTRAIN_AGENT_ADDR is unset (not started by dtrain): nothing to report to. Throws
  // std::invalid_argument naming the variable when RANK or DTRAIN_HEALTH_INTERVAL_MS is set but malformed.
  static std::unique_ptr<HealthReporter> from_env();

  // Starts the thread, which sends the start-up report at once. When the worker's TLS files cannot be read, says
  // so once and reports nothing (training goes on).
  explicit HealthReporter(HealthReporterOptions options);
  HealthReporter(const HealthReporter&) = delete;
  HealthReporter& operator=(const HealthReporter&) = delete;
  // Sends what is pending (within one deadline) and stops the thread.
  ~HealthReporter();

  // One completed step's values (each call counts one step). Never blocks on the network.
  void report(const HealthReport& report);

  // The signal on which this worker writes its stacks to DTRAIN_STACKS_FILE, carried by every report from the
  // next on (0, the default: none).
  void set_dump_signal(std::uint32_t signal);

  // Reports sent and accepted / failed so far.
  std::uint64_t sent() const;
  std::uint64_t failed() const;

 private:
  void run();

  HealthReporterOptions options_;
  std::unique_ptr<worker::ReportClient> client_;   // null: reports are off (the TLS files cannot be read)
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  HealthReport latest_;             // what the next heartbeat resends (without points)
  std::vector<StepPoint> pending_points_;   // the steps since the last send, for the next one
  std::uint64_t steps_done_ = 0;    // report() calls so far
  bool fresh_ = true;               // latest_ not sent yet (the start-up report, then each new step)
  bool stop_ = false;
  std::uint32_t dump_signal_ = 0;
  std::uint64_t sent_ = 0;
  std::uint64_t failed_ = 0;
  std::thread thread_;
};

// This process's resident set size in bytes (from /proc/self/statm); 0 if unknown.
std::uint64_t resident_bytes();

}  // namespace dtrain::trainer

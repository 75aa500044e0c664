#pragma once

// Health reports from a worker to its node's agent (WorkerReports.Report at DTRAIN_AGENT_ADDR, with this round's
// DTRAIN_JOB_TOKEN as `dtrain-token` metadata and this worker's own DTRAIN_REPORT_TOKEN as `dtrain-report-token`,
// which the agent requires of a report for this rank): step, loss, tokens/s and resident memory, after every step.
// The agent refuses values that cannot be real (a loss that is not finite, say: agent/service/report_service.h).
// Training never waits for it: report() only stores the newest values and a background thread sends them, each
// call with a short deadline; values that arrive while a call is in flight replace each other (the agent wants the
// latest, not a history). A failed report is logged once (then every 100th), and training goes on.
// With DTRAIN_TLS_CA set (a cluster that uses TLS) the channel is mutual TLS with the worker certificate in
// DTRAIN_TLS_CERT/KEY (no cluster token), as the store client does.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace dtrain::trainer {

struct HealthReport {
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  std::uint64_t rss_bytes = 0;
};

struct HealthReporterOptions {
  std::string address;                         // the agent's WorkerReports server (host:port)
  std::string token;                           // this round's job token
  std::string report_token;                    // this worker's DTRAIN_REPORT_TOKEN
  std::chrono::milliseconds deadline{2'000};   // per report call
};

class HealthReporter {
 public:
  // Null when DTRAIN_AGENT_ADDR is unset (not started by dtrain): nothing to report to.
  static std::unique_ptr<HealthReporter> from_env();

  explicit HealthReporter(HealthReporterOptions options);
  HealthReporter(const HealthReporter&) = delete;
  HealthReporter& operator=(const HealthReporter&) = delete;
  // Sends what is pending (within one deadline) and stops the thread.
  ~HealthReporter();

  // Never blocks on the network.
  void report(const HealthReport& report);

  // Reports sent and accepted / failed so far.
  std::uint64_t sent() const;
  std::uint64_t failed() const;

 private:
  struct Channel;
  void run();

  HealthReporterOptions options_;
  std::unique_ptr<Channel> channel_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<HealthReport> pending_;
  bool stop_ = false;
  std::uint64_t sent_ = 0;
  std::uint64_t failed_ = 0;
  std::thread thread_;
};

// This process's resident set size in bytes (from /proc/self/statm); 0 if unknown.
std::uint64_t resident_bytes();

}  // namespace dtrain::trainer

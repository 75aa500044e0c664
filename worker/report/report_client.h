#pragma once

// The transport of a worker's health reports: one WorkerReports.Report call to its node's agent (DTRAIN_AGENT_ADDR),
// carrying this round's DTRAIN_JOB_TOKEN as `dtrain-token` metadata and this worker's own DTRAIN_REPORT_TOKEN as
// `dtrain-report-token` (common/grpc/metadata.h), which the agent requires of a report for this rank, each call with a
// deadline. With DTRAIN_TLS_CA set (a cluster that uses TLS) the channel is mutual TLS with the worker certificate
// (worker/credentials.h), as the store client's is. When and what to report is the caller's (dtrain-trainer:
// trainer/health/reporter.h); this header includes no gRPC or protobuf.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/report/health_values.h"
#include "common/status.h"

namespace dtrain::worker {

// One completed step: report.proto's WorkerReport as plain values (common/report/health_values.h, 0: not known).
// Of dtrain-trainer's, each part of the step's time is wall time of the training thread, disjoint from the others,
// so their sum is at most step_ms: data_wait_ms blocked in the prefetcher's next(), compute_ms forward and backward,
// comm_exposed_ms waiting for gradient reductions after backward and for the loss allreduce, optimizer_ms loss-scale
// bookkeeping, clipping, AdamW, the working copy's refresh or gather, and with --pp above 1 pipeline_bubble_ms a
// stage's waits for its neighbours' activations and gradients (the --metrics line's pp_bubble_ms); the mem_* values
// are the --metrics line's (trainer/metrics/jsonl.h); tp_rank, tp_size, pp_stage and pp_size the rank's place in the
// --tp x --pp grid (sizes 1 without them). steps_done, phase, dump_signal and exiting are the ReportContext's at the
// call.
using HealthReport = HealthValues;

// What a report carries besides the step's values: the sender's state as the call goes out.
struct ReportContext {
  std::uint64_t steps_done = 0;   // steps this process completed so far (a heartbeat repeats the last count)
  std::string phase;              // what the worker is doing now (trainer/health/phase.h), "" if not known
  std::uint32_t dump_signal = 0;  // the signal on which the worker writes its stacks, 0: none
  // The worker has finished and is exiting: this is its last report, and the launcher stops its health checks (no
  // heartbeat follows while it tears down); its exit status is still judged as any worker's.
  bool exiting = false;
};

struct ReportClientOptions {
  std::string address;                         // the agent's WorkerReports server (host:port): DTRAIN_AGENT_ADDR
  std::string token;                           // this round's job token: DTRAIN_JOB_TOKEN
  std::string report_token;                    // this worker's own DTRAIN_REPORT_TOKEN
  std::chrono::milliseconds deadline{2'000};   // of each Report call
};

class ReportClient {
 public:
  // The client of the agent at options.address. The channel connects on the first call, so this never waits for
  // the agent; it fails (with credentials_from_env's not_found) only when the worker's TLS files cannot be read.
  static Result<std::unique_ptr<ReportClient>> open(ReportClientOptions options);

  ReportClient(const ReportClient&) = delete;
  ReportClient& operator=(const ReportClient&) = delete;
  ~ReportClient();

  // One Report call, within options.deadline; unavailable with gRPC's message when the agent did not accept it.
  // Thread-safe.
  Status send(const HealthReport& report, const ReportContext& context) const;

 private:
  struct Impl;
  explicit ReportClient(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::worker

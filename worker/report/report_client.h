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

#include "common/status.h"

namespace dtrain::worker {

// One completed step, as report.proto's WorkerReport says (0: not known).
struct HealthReport {
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double samples_per_s = 0;      // batch elements per second, over all micro-steps
  std::uint64_t rss_bytes = 0;
  // Where the step's time went: each part is wall time of the training thread, disjoint from the others, so their
  // sum is at most step_ms (the rest: the loss allreduce's bookkeeping, timers, the loop itself).
  double step_ms = 0;
  double data_wait_ms = 0;       // blocked in the prefetcher's next()
  double compute_ms = 0;         // forward and backward
  double comm_exposed_ms = 0;    // waiting for gradient reductions after backward, and for the loss allreduce
  double optimizer_ms = 0;       // loss-scale bookkeeping, clipping, AdamW, the working copy's refresh or gather
  std::uint64_t device_mem_used_bytes = 0;
  std::uint64_t device_mem_total_bytes = 0;
  std::uint64_t device_mem_peak_bytes = 0;   // the most the process's tensors held (max_memory_allocated)
  // The --metrics line's values (trainer/metrics/jsonl.h), 0 where it has none.
  std::uint64_t mem_params_bytes = 0;
  std::uint64_t mem_grads_bytes = 0;
  std::uint64_t mem_optim_bytes = 0;
  std::uint64_t mem_activations_bytes = 0;
  std::uint64_t mem_gathered_peak_bytes = 0;
  std::uint64_t comm_bytes = 0;
  double loss_scale = 0;
};

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

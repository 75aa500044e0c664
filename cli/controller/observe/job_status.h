#pragma once

// The job as `dtrain status` shows it: one row per rank of the current round (where it runs, its process, its
// latest report) and the diagnoses, rendered as the snapshot JSON that the control socket serves and the run
// directory keeps (status.json):
//   {"job", "state": "running|succeeded|failed", "attempt", "updated_unix_ms",
//    "ranks": [{"rank", "node", "host", "pid", "state", "step", "step_ms", "tokens_per_s", "samples_per_s", "loss",
//               "data_wait_ratio", "comm_exposed_ratio", "pipeline_bubble_ratio", "tp_rank", "tp_size",
//               "pp_stage", "pp_size", "rss_bytes", "device_mem_used_bytes",
//               "device_mem_total_bytes", "device_mem_peak_bytes", "model_params", "model_flops_per_token",
//               "flops_basis", "device_name", "model_flops_per_s", "peak_flops_per_s", "peak_basis", "mfu",
//               "phase", "exiting", "report_age_s", "recent_step_ms": [oldest .. newest]}],
//    "diagnoses": [{"kind", "ranks", "message", "fix"}],
//    "nodes": [{"node", "host", "up"}], "metrics_address": "host:port" or null,
//    "model_flops_per_s", "mfu", "flops_basis", "peak_basis" (the job's: cli/mfu/model_flops.h),
//    "status_file_error": {"message", "since_unix_ms"} (only while status.json cannot be written)}
// A rank's state is starting (planned, not started yet), running, exited (code 0), failed (its own failure) or stopped
// (ended by a stop of its group). exiting is true once the rank sent its last report (its process finished and is
// exiting: of health_watch.h's checks only the teardown one, health.exit_timeout_s, applies), whatever its state.
// report_age_s is null until it reports. A node of the round is up until the launcher gives it up (node_lost);
// pipeline_bubble_ratio is a pipeline stage's waits for its neighbours over its step, over its window as the other
// ratios (null unless the rank reported pp_size above 1); tp_rank, tp_size, pp_stage and pp_size its place in a --tp x
// --pp grid as its reports say it (sizes 0: not reported, 1: not split that way).
// recent_step_ms holds the step times of the rank's last kRecentSteps new steps as its reports told them (a heartbeat
// that repeats a step adds nothing), for `dtrain status --watch`'s sparklines; metrics_address is where /metrics is
// served (observe.metrics_addr). The model fields are null until known: model_flops_per_s is model_flops_per_token x
// tokens_per_s, mfu that over peak_flops_per_s (a GPU's dense bf16/fp16 peak; a CPU rank's share of its node's
// measured fp32 GEMM rate, node_cpu_gemm, null where `dtrain doctor` cached none; a fraction, 0.42 = 42%),
// flops_basis "6N estimate" (a script's 6 x model_params) or "exact" (dtrain-trainer's count with attention); the
// job's are the ranks' summed (cli/mfu/model_flops.h).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/controller/diagnose/diagnosis.h"
#include "cli/controller/session/session_messages.h"
#include "cli/mfu/model_flops.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

class JobStatus {
 public:
  // Enough history for a sparkline to show a trend (a minute at a step every 2 s), little enough that the snapshot of
  // 1,024 ranks stays small.
  static constexpr std::size_t kRecentSteps = 32;

  explicit JobStatus(std::string job_id) : job_id_(std::move(job_id)) {}

  // A new attempt: its planned ranks, none started yet.
  void round_started(std::uint32_t round, const spec::Plan& plan);
  void started(const WorkerStarted& started);
  void exited(const WorkerExit& exit);
  // `unix_ms` is the launcher's clock when the report arrived (report ages do not depend on the nodes' clocks).
  void reported(const WorkerHealth& health, std::uint64_t unix_ms);
  // The launcher gave up node rank `node` of this round.
  void node_lost(unsigned node);
  // Node `node`'s measured fp32 GEMM rate (its agent's hello; 0 = none): the peak of its CPU ranks' MFU.
  void node_cpu_gemm(unsigned node, const mfu::CpuGemm& gemm);
  // The bound address of the metrics endpoint ("" = none).
  void set_metrics_address(std::string address) { metrics_address_ = std::move(address); }
  // Why status.json could not be written, since when ("" once it is written again): a live `dtrain status` then
  // says the file is stale, as it will be if the launcher ends before it can write it.
  void set_status_file_error(std::string message, std::uint64_t since_unix_ms) {
    status_file_error_ = std::move(message);
    status_file_error_since_ms_ = since_unix_ms;
  }

  // The node rank of `rank` in this round, if it is planned.
  std::optional<unsigned> node_of(unsigned rank) const;
  std::uint32_t round() const { return round_; }

  // One rank's row; `now_ms` the launcher's clock.
  nlohmann::ordered_json rank_json(unsigned rank, const Diagnoser& diagnoser, std::uint64_t now_ms) const;
  // The whole snapshot; `state` running, succeeded or failed.
  nlohmann::ordered_json snapshot(const std::string& state, const Diagnoser& diagnoser, std::uint64_t now_ms) const;
  std::vector<unsigned> ranks() const;
  std::size_t rank_count() const { return rows_.size(); }

 private:
  struct Row {
    unsigned node = 0;
    std::string host;
    std::uint32_t pid = 0;
    std::string state = "starting";
    std::optional<WorkerHealth> health;
    std::uint64_t reported_ms = 0;
    std::deque<double> recent_step_ms;   // at most kRecentSteps, oldest first
    bool exiting = false;                // a report said so; a heartbeat after it does not undo it
    unsigned omp_threads = 0;            // its planned OMP_NUM_THREADS (0: not known), its share of a CPU node
  };

  struct NodeRow {
    std::string host;
    bool up = true;
    mfu::CpuGemm cpu_gemm;               // none until node_cpu_gemm
  };

  // The rank's model FLOP/s and MFU from its latest report (none before one).
  mfu::ModelFlops model_flops_of(const Row& row) const;

  std::string job_id_;
  std::string metrics_address_;
  std::string status_file_error_;
  std::uint64_t status_file_error_since_ms_ = 0;
  std::uint32_t round_ = 0;
  std::map<unsigned, Row> rows_;        // by rank
  std::map<unsigned, NodeRow> nodes_;   // by node rank
};

nlohmann::ordered_json to_json(const Diagnosis& diagnosis);

}  // namespace dtrain::controller

#include "cli/controller/observe/job_status.h"

#include "cli/mfu/model_flops.h"

namespace dtrain::controller {
namespace {

// A value of the snapshot that may not be known yet: null then. (No alias for the JSON type: the unity build puts
// status_view.cpp's beside this file.)
nlohmann::ordered_json or_null(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}
nlohmann::ordered_json or_null(const std::string& text) {
  return text.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(text);
}

// The model and its FLOP/s (cli/mfu/model_flops.h); null where not known.
void add_model_flops(nlohmann::ordered_json& out, const WorkerHealth& h, const mfu::ModelFlops& flops) {
  out["model_params"] = h.model_params > 0 ? nlohmann::ordered_json(h.model_params) : nlohmann::ordered_json(nullptr);
  out["model_flops_per_token"] = or_null(h.model_flops_per_token > 0 ? std::optional(h.model_flops_per_token)
                                                                     : std::nullopt);
  out["flops_basis"] = or_null(std::string(mfu::to_string(flops.basis)));
  out["device_name"] = or_null(h.device_name);
  out["model_flops_per_s"] = or_null(flops.flops_per_s);
  out["peak_flops_per_s"] = or_null(flops.peak_flops);
  out["peak_basis"] = or_null(flops.peak_basis);
  out["mfu"] = or_null(flops.mfu);
}

}  // namespace

nlohmann::ordered_json to_json(const Diagnosis& d) {
  return {{"kind", to_string(d.kind)}, {"ranks", d.ranks}, {"message", d.message}, {"fix", d.fix}};
}

void JobStatus::round_started(std::uint32_t round, const spec::Plan& plan) {
  round_ = round;
  rows_.clear();
  nodes_.clear();
  for (const auto& w : plan.workers) {
    rows_[w.rank] = Row{w.node_rank, w.host, 0, "starting", std::nullopt, 0, {}, false, w.omp_threads};
    nodes_[w.node_rank] = NodeRow{w.host, true, {}};
  }
}

void JobStatus::node_cpu_gemm(unsigned node, const mfu::CpuGemm& gemm) {
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.cpu_gemm = gemm;
}

mfu::ModelFlops JobStatus::model_flops_of(const Row& row) const {
  const WorkerHealth h = row.health.value_or(WorkerHealth{});
  std::optional<double> cpu_peak;
  if (auto it = nodes_.find(row.node); it != nodes_.end()) {
    cpu_peak = mfu::cpu_rank_peak(it->second.cpu_gemm, row.omp_threads);
  }
  return mfu::rank_model_flops(h.model_params, h.model_flops_per_token, h.tokens_per_s, h.device_name, cpu_peak);
}

void JobStatus::node_lost(unsigned node) {
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.up = false;
}

void JobStatus::started(const WorkerStarted& started) {
  if (started.round != round_) return;
  Row& row = rows_[started.rank];
  row.pid = started.pid;
  row.state = "running";
}

void JobStatus::exited(const WorkerExit& exit) {
  if (exit.round != round_) return;
  Row& row = rows_[exit.rank];
  row.pid = exit.pid;
  row.state = exit.failed() ? "failed" : exit.stopped_by_agent ? "stopped" : "exited";
}

void JobStatus::reported(const WorkerHealth& health, std::uint64_t unix_ms) {
  auto it = rows_.find(health.rank);
  if (it == rows_.end()) return;   // a late report of an earlier round's rank that this round does not have
  Row& row = it->second;
  const bool new_step = !row.health || health.step != row.health->step || health.steps_done != row.health->steps_done;
  if (new_step && health.step_ms > 0) {
    row.recent_step_ms.push_back(health.step_ms);
    if (row.recent_step_ms.size() > kRecentSteps) row.recent_step_ms.pop_front();
  }
  row.health = health;
  row.health->points.clear();   // the samples events' (JobMonitor); a row keeps the latest values only
  row.reported_ms = unix_ms;
  row.exiting = row.exiting || health.exiting;
}

std::optional<unsigned> JobStatus::node_of(unsigned rank) const {
  auto it = rows_.find(rank);
  if (it == rows_.end()) return std::nullopt;
  return it->second.node;
}

std::vector<unsigned> JobStatus::ranks() const {
  std::vector<unsigned> out;
  for (const auto& [rank, row] : rows_) out.push_back(rank);
  return out;
}

nlohmann::ordered_json JobStatus::rank_json(unsigned rank, const Diagnoser& diagnoser, std::uint64_t now_ms) const {
  const Row& row = rows_.at(rank);
  nlohmann::ordered_json out = {{"rank", rank}, {"node", row.node}, {"host", row.host}, {"pid", row.pid},
                                {"state", row.state}};
  const WorkerHealth h = row.health.value_or(WorkerHealth{});
  const auto means = diagnoser.means(rank);
  out["step"] = h.step;
  out["step_ms"] = h.step_ms;
  out["tokens_per_s"] = h.tokens_per_s;
  out["samples_per_s"] = h.samples_per_s;
  out["loss"] = h.loss;
  // Over the rank's window of steps: one step's ratios jump with every page fault.
  out["data_wait_ratio"] = means ? means->data_wait_ratio : 0.0;
  out["comm_exposed_ratio"] = means ? means->comm_exposed_ratio : 0.0;
  // Only of a pipeline stage: elsewhere there is no bubble to measure, and a 0 would read as a measurement.
  if (h.pp_size > 1) {
    out["pipeline_bubble_ratio"] = means ? means->pipeline_bubble_ratio : 0.0;
  } else {
    out["pipeline_bubble_ratio"] = nullptr;
  }
  out["tp_rank"] = h.tp_rank;
  out["tp_size"] = h.tp_size;
  out["pp_stage"] = h.pp_stage;
  out["pp_size"] = h.pp_size;
  out["rss_bytes"] = h.rss_bytes;
  out["device_mem_used_bytes"] = h.device_mem_used_bytes;
  out["device_mem_total_bytes"] = h.device_mem_total_bytes;
  out["device_mem_peak_bytes"] = h.device_mem_peak_bytes;
  // What the rank holds, as its --metrics line's mem_* keys say (dtrain-trainer at --zero 1..3; 0 when not
  // reported): `dtrain plan --from` reads them for its ZeRO remedy.
  out["mem_params_bytes"] = h.mem_params_bytes;
  out["mem_grads_bytes"] = h.mem_grads_bytes;
  out["mem_optim_bytes"] = h.mem_optim_bytes;
  out["mem_activations_bytes"] = h.mem_activations_bytes;
  add_model_flops(out, h, model_flops_of(row));
  out["phase"] = h.phase;
  out["exiting"] = row.exiting;
  if (row.health) {
    out["report_age_s"] = now_ms >= row.reported_ms ? static_cast<double>(now_ms - row.reported_ms) / 1000.0 : 0.0;
  } else {
    out["report_age_s"] = nullptr;
  }
  return out;
}

nlohmann::ordered_json JobStatus::snapshot(const std::string& state, const Diagnoser& diagnoser,
                                           std::uint64_t now_ms) const {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  mfu::JobModelFlops job_flops;
  for (const auto& [rank, row] : rows_) {
    if (row.health) job_flops.add(model_flops_of(row));
    // Only in the snapshot: the health events of events.jsonl carry each rank's latest report, not its history.
    nlohmann::ordered_json r = rank_json(rank, diagnoser, now_ms);
    r["recent_step_ms"] = row.recent_step_ms;
    ranks.push_back(std::move(r));
  }
  nlohmann::ordered_json diagnoses = nlohmann::ordered_json::array();
  for (const auto& d : diagnoser.diagnoses()) diagnoses.push_back(to_json(d));
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  for (const auto& [node, row] : nodes_) nodes.push_back({{"node", node}, {"host", row.host}, {"up", row.up}});
  nlohmann::ordered_json address = nullptr;
  if (!metrics_address_.empty()) address = metrics_address_;
  nlohmann::ordered_json out = {{"job", job_id_}, {"state", state}, {"attempt", round_}, {"updated_unix_ms", now_ms},
                                {"ranks", std::move(ranks)}, {"diagnoses", std::move(diagnoses)},
                                {"nodes", std::move(nodes)}, {"metrics_address", std::move(address)},
                                {"model_flops_per_s", or_null(job_flops.flops_per_s())},
                                {"mfu", or_null(job_flops.mfu())}, {"flops_basis", or_null(job_flops.flops_basis())},
                                {"peak_basis", or_null(job_flops.peak_basis())}};
  if (!status_file_error_.empty()) {
    out["status_file_error"] = {{"message", status_file_error_}, {"since_unix_ms", status_file_error_since_ms_}};
  }
  return out;
}

}  // namespace dtrain::controller

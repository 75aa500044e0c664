#include "cli/controller/observe/job_metrics.h"

#include <string>

namespace dtrain::controller {
namespace {

// One per-rank gauge: its name, help, how its value is read from a rank's row, and the row's key that must be a
// number for the rank to have a sample (nullptr: every rank that reported has one). A value the snapshot says is not
// known (null: the model FLOP/s before a rank reports its model) is left out, not written as a 0.
struct WorkerGauge {
  const char* name;
  const char* help;
  double (*value)(const nlohmann::ordered_json& row);
  const char* known_key = nullptr;
};

double number(const nlohmann::ordered_json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : 0.0;
}

constexpr WorkerGauge kWorkerGauges[] = {
    {"dtrain_worker_step", "The latest step the rank reported.", [](const auto& r) { return number(r, "step"); }},
    {"dtrain_worker_step_seconds", "Duration of the rank's latest step, in seconds (0: not reported).",
     [](const auto& r) { return number(r, "step_ms") / 1000.0; }},
    {"dtrain_worker_tokens_per_second", "Tokens per second the rank reported.",
     [](const auto& r) { return number(r, "tokens_per_s"); }},
    {"dtrain_worker_samples_per_second", "Samples (batch elements) per second the rank reported (0: not reported).",
     [](const auto& r) { return number(r, "samples_per_s"); }},
    {"dtrain_worker_data_wait_ratio", "Data wait over step time, mean of the rank's latest window of steps.",
     [](const auto& r) { return number(r, "data_wait_ratio"); }},
    {"dtrain_worker_comm_exposed_ratio",
     "Communication not hidden behind compute over step time, mean of the rank's latest window of steps.",
     [](const auto& r) { return number(r, "comm_exposed_ratio"); }},
    {"dtrain_worker_pipeline_bubble_ratio",
     "A pipeline stage's waits for its neighbours' activations and gradients (the bubble) over step time, mean of "
     "the rank's latest window of steps (only of ranks of a pipeline).",
     [](const auto& r) { return number(r, "pipeline_bubble_ratio"); }, "pipeline_bubble_ratio"},
    {"dtrain_worker_rss_bytes", "Resident memory of the rank's process, in bytes.",
     [](const auto& r) { return number(r, "rss_bytes"); }},
    {"dtrain_worker_device_mem_peak_bytes",
     "Peak accelerator memory the rank's tensors held, in bytes (torch.cuda.max_memory_allocated; 0: not reported).",
     [](const auto& r) { return number(r, "device_mem_peak_bytes"); }},
    {"dtrain_worker_model_flops_per_second",
     "Model FLOP/s of the rank: its model FLOPs per token (6N estimate from a script, exact from dtrain-trainer) "
     "times its tokens per second.",
     [](const auto& r) { return number(r, "model_flops_per_s"); }, "model_flops_per_s"},
    {"dtrain_worker_mfu",
     "Model FLOPs utilization of the rank, a fraction: its model FLOP/s over its GPU's dense bf16/fp16 peak.",
     [](const auto& r) { return number(r, "mfu"); }, "mfu"},
};

std::string text(const nlohmann::ordered_json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.is_null() ? std::string() : value.dump();
}

}  // namespace

std::vector<MetricFamily> job_metrics(const nlohmann::ordered_json& snapshot) {
  const std::string job = text(snapshot.value("job", nlohmann::ordered_json()));
  std::vector<MetricFamily> out;
  const nlohmann::ordered_json no_rows = nlohmann::ordered_json::array();
  const auto& ranks = snapshot.contains("ranks") ? snapshot["ranks"] : no_rows;
  for (const auto& gauge : kWorkerGauges) {
    MetricFamily family{gauge.name, gauge.help, MetricFamily::Type::gauge, {}};
    for (const auto& row : ranks) {
      if (row.value("report_age_s", nlohmann::ordered_json()).is_null()) continue;
      if (gauge.known_key != nullptr && !row.value(gauge.known_key, nlohmann::ordered_json()).is_number()) continue;
      family.samples.push_back({{{"job", job}, {"rank", text(row["rank"])}, {"node", text(row["node"])}},
                                gauge.value(row)});
    }
    out.push_back(std::move(family));
  }
  out.push_back({"dtrain_job_restarts_total", "Times the job was restarted after a failure.",
                 MetricFamily::Type::counter, {{{{"job", job}}, number(snapshot, "attempt")}}});
  MetricFamily up{"dtrain_node_up", "1 while the node's agent is part of the job, 0 once the launcher gave it up.",
                  MetricFamily::Type::gauge, {}};
  const auto& nodes = snapshot.contains("nodes") ? snapshot["nodes"] : no_rows;
  for (const auto& node : nodes) {
    up.samples.push_back({{{"job", job}, {"node", text(node["node"])}}, node.value("up", false) ? 1.0 : 0.0});
  }
  out.push_back(std::move(up));
  return out;
}

}  // namespace dtrain::controller

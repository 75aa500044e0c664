// tune.json (result.h): what the report page's "Tuning" section and a user's scripts read.

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/tune/measure.h"
#include "cli/tune/outcome.h"
#include "common/clock.h"

namespace dtrain::tune {
namespace {

using nlohmann::ordered_json;

ordered_json candidate_json(const CandidateResult& c) {
  ordered_json j;
  j["name"] = c.candidate.name;
  j["knobs"] = has_python_knobs(c.candidate.overlay) ? ordered_json::parse(python_knobs_json(c.candidate.overlay))
                                                     : ordered_json::object();
  j["knobs"].erase("file");
  if (c.candidate.overlay.binding) {
    j["knobs"]["binding"] = spec::to_string(*c.candidate.overlay.binding);
  }
  ordered_json env = ordered_json::object();
  for (const auto& [name, value] : c.candidate.overlay.env) env[name] = value;
  for (const auto& [name, value] : c.candidate.env) env[name] = value;
  j["env"] = env;
  j["args"] = c.candidate.args;
  j["status"] = c.status;
  j["trials"] = c.trials.size();
  j["rate"] = c.rate;
  j["speedup"] = c.speed.ratio;
  j["ci"] = {c.speed.low, c.speed.high};
  j["data_wait_ms"] = median_of(c.trials, &TrialMeasure::data_wait_ms);
  j["comm_ms"] = median_of(c.trials, &TrialMeasure::comm_ms);
  j["memory_bytes"] = median_of(c.trials, &TrialMeasure::memory_bytes);
  j["loss_check"] = c.loss_check;
  j["note"] = c.note;
  return j;
}

}  // namespace

std::string result_json(const TuneResult& r, const Conclusion& conclusion, const spec::Spec& spec,
                        const TuneOptions& options, std::uint64_t started_ms) {
  ordered_json j;
  j["version"] = 1;
  j["job"] = spec.name;
  j["command"] = spec.command;
  j["started_ms"] = started_ms;
  j["ended_ms"] = unix_ms();
  j["budget_s"] = options.budget_s;
  j["warmup_steps"] = options.trial.warmup;
  j["trial_steps"] = options.trial.steps;
  j["repeats"] = options.repeats;
  j["ranks"] = r.facts.ranks;
  j["unit"] = r.unit;
  j["bottleneck"] = r.facts.bottleneck();
  j["shares"] = {{"data", r.facts.data_share}, {"communication", r.facts.comm_share},
                 {"compute", r.facts.compute_share}};
  const auto& base = r.results.front();
  j["baseline_run"] = base.trials.empty() || base.trials.front().run_dir.empty()
                          ? std::string()
                          : std::filesystem::relative(base.trials.front().run_dir, options.dir).string();
  ordered_json candidates = ordered_json::array();
  for (const auto& c : r.results) candidates.push_back(candidate_json(c));
  j["candidates"] = candidates;
  j["recommended"] = r.recommended;
  j["verdict"] = conclusion.verdict;
  j["lines"] = conclusion.lines;
  j["suggestions"] = conclusion.suggestions;
  j["tune_yaml"] = conclusion.tune_yaml.empty() ? "" : "tune.yaml";
  j["seconds"] = r.seconds;
  j["trials_run"] = r.trials_run;
  j["ended"] = r.ended;
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace dtrain::tune

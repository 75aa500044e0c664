// The trial line (trial.h): written by a worker, read here. Every field is checked for its type and range; a line
// that is not a trial object is skipped, so a script's own output that happens to start the same costs nothing.

#include "cli/tune/trial.h"

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

namespace dtrain::tune {
namespace {

using nlohmann::json;

// The most entries read from the line's arrays: a trial measures at most kMaxTrialSteps steps.
constexpr std::size_t kMaxArray = 100000;
// A line longer than this is not a trial line (30 steps write about 700 bytes).
constexpr std::size_t kMaxLineBytes = 4 << 20;

std::optional<double> number(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  const double value = it->get<double>();
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

double number_or(const json& object, const char* key, double fallback) {
  return number(object, key).value_or(fallback);
}

std::optional<bool> boolean(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

int whole(const json& object, const char* key) {
  const double value = number_or(object, key, 0);
  return value >= 0 && value <= 1e9 ? static_cast<int>(value) : 0;
}

// An object member as its compact JSON, and the object itself; "" and null when absent or not an object.
const json* object_member(const json& object, const char* key, std::string& text) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_object()) return nullptr;
  text = it->dump();
  return &*it;
}

void read_settings(const json& j, RankTrial& t) {
  if (const json* loader = object_member(j, "loader", t.loader_json)) {
    if (auto w = number(*loader, "num_workers")) t.loader_num_workers = static_cast<int>(*w);
    t.loader_pin_memory = boolean(*loader, "pin_memory");
    t.loader_persistent_workers = boolean(*loader, "persistent_workers");
    if (auto p = number(*loader, "prefetch_factor")) t.loader_prefetch_factor = static_cast<int>(*p);
  }
  if (const json* ddp = object_member(j, "ddp", t.ddp_json)) {
    t.ddp_bucket_cap_mb = number(*ddp, "bucket_cap_mb");
    t.ddp_gradient_as_bucket_view = boolean(*ddp, "gradient_as_bucket_view");
  }
  if (const json* trainer = object_member(j, "trainer", t.trainer_json)) {
    t.trainer_bucket_mb = number(*trainer, "ddp_bucket_mb");
    const auto backend = trainer->find("backend");
    if (backend != trainer->end() && backend->is_string()) t.trainer_backend = backend->get<std::string>();
  }
}

}  // namespace

std::string trial_env_value(const TrialSettings& s) {
  return "{\"warmup\":" + std::to_string(s.warmup) + ",\"steps\":" + std::to_string(s.steps) +
         ",\"losses\":" + std::to_string(s.losses) + "}";
}

std::optional<RankTrial> parse_trial_line(std::string_view text) {
  if (text.size() > kMaxLineBytes) return std::nullopt;
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto rank = number(j, "rank");
  if (!rank || *rank < 0 || *rank > 1e7) return std::nullopt;
  RankTrial t;
  t.rank = static_cast<int>(*rank);
  t.steps = whole(j, "steps");
  t.complete = boolean(j, "complete").value_or(false);
  if (auto d = j.find("device"); d != j.end() && d->is_string()) t.device = d->get<std::string>();
  if (auto s = j.find("step_s"); s != j.end() && s->is_array()) {
    for (const auto& v : *s) {
      if (t.step_s.size() >= kMaxArray) break;
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) return std::nullopt;
      t.step_s.push_back(v.get<double>());
    }
  }
  if (auto l = j.find("losses"); l != j.end() && l->is_array()) {
    for (const auto& v : *l) {
      if (t.losses.size() >= kMaxArray) break;
      t.losses.push_back(v.is_number() && std::isfinite(v.get<double>()) ? std::optional(v.get<double>())
                                                                          : std::nullopt);
    }
  }
  t.data_wait_s = std::max(0.0, number_or(j, "data_wait_s", 0));
  t.comm_s = std::max(0.0, number_or(j, "comm_s", 0));
  t.samples = number(j, "samples");
  t.tokens = number(j, "tokens");
  t.rss_bytes = std::max(0.0, number_or(j, "rss_bytes", 0));
  t.device_peak_bytes = std::max(0.0, number_or(j, "device_peak_bytes", 0));
  t.cpus = whole(j, "cpus");
  t.threads = whole(j, "threads");
  read_settings(j, t);
  return t;
}

std::vector<RankTrial> find_trial_lines(std::string_view text) {
  std::map<int, RankTrial> by_rank;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    const std::size_t found = line.find(kTrialLinePrefix);
    // The line itself, or after a console's "[R] " prefix: nothing else may come before it.
    if (found == std::string_view::npos || (found > 0 && line[0] != '[')) continue;
    if (auto trial = parse_trial_line(line.substr(found + kTrialLinePrefix.size()))) {
      by_rank[trial->rank] = std::move(*trial);
    }
  }
  std::vector<RankTrial> out;
  for (auto& [rank, trial] : by_rank) out.push_back(std::move(trial));
  return out;
}

}  // namespace dtrain::tune

#include "cli/plan/measured/measured_memory.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "common/io/bounded_file.h"

namespace dtrain::plan {
namespace {

namespace fs = std::filesystem;

// A shape or batch value above this is not the trainer's (a damaged line); kept, it would overflow an int.
constexpr std::uint64_t kMaxShapeValue = 1u << 30;
// The rank logs tried for the trainer's first line: every rank prints it, so a few are enough.
constexpr std::size_t kMaxLogsTried = 8;

// The unsigned number at `key` of `row`, 0 when it is missing or not one.
std::uint64_t bytes_at(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

void keep_max(std::uint64_t& kept, std::uint64_t value) { kept = std::max(kept, value); }

// status.json's rank rows of `round` (the snapshot of an older round, left by a killed launcher, is not the job's
// last memory).
void read_status_rows(MeasuredMemory& m, const std::string& dir, std::uint32_t round) {
  const auto text = read_bounded_file((fs::path(dir) / "status.json").string(),
                                      FileBound{report::kMaxStatusFileBytes});
  if (!text.ok()) return;
  const nlohmann::json status = nlohmann::json::parse(text.value, nullptr, false);
  if (!status.is_object() || !status.contains("ranks") || !status["ranks"].is_array()) return;
  if (status.contains("attempt") && status["attempt"] != round) return;
  bool states = false;
  for (const auto& row : status["ranks"]) {
    if (!row.is_object()) continue;
    keep_max(m.rss_bytes, bytes_at(row, "rss_bytes"));
    keep_max(m.device_used_bytes, bytes_at(row, "device_mem_used_bytes"));
    keep_max(m.device_peak_bytes, bytes_at(row, "device_mem_peak_bytes"));
    keep_max(m.device_total_bytes, bytes_at(row, "device_mem_total_bytes"));
    keep_max(m.params_bytes, bytes_at(row, "mem_params_bytes"));
    keep_max(m.grads_bytes, bytes_at(row, "mem_grads_bytes"));
    keep_max(m.optim_bytes, bytes_at(row, "mem_optim_bytes"));
    keep_max(m.activations_bytes, bytes_at(row, "mem_activations_bytes"));
    states = states || bytes_at(row, "mem_params_bytes") > 0;
  }
  if (states) m.states = StatesSource::reported;
}

// The value after `key` in `text` (e.g. "L=" in "model L=2 C=64"), 0 when the key is missing.
std::uint64_t number_after(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(key);
  if (at == std::string::npos) return 0;
  unsigned long long value = 0;
  return std::sscanf(text.c_str() + at + key.size(), "%llu", &value) == 1 ? value : 0;
}

}  // namespace

std::uint64_t MeasuredMemory::rank_bytes() const {
  if (device_peak_bytes > 0) return device_peak_bytes;
  if (device_used_bytes > 0) return device_used_bytes;
  return rss_bytes;
}

MeasuredMemory read_memory(const report::RunModel& model, std::uint32_t round) {
  MeasuredMemory m;
  for (const auto& window : model.samples) {
    if (window.round != round) continue;
    for (const auto& s : window.ranks) {
      keep_max(m.rss_bytes, s.rss_bytes);
      keep_max(m.device_used_bytes, s.device_mem_used_bytes);
      keep_max(m.device_total_bytes, s.device_mem_total_bytes);
    }
  }
  read_status_rows(m, model.dir, round);
  return m;
}

TrainerModel parse_trainer_model(const std::string& log) {
  const std::size_t at = log.find("model L=");
  if (at == std::string::npos) return {};
  const std::size_t end = log.find('\n', at);
  const std::string line = log.substr(at, end == std::string::npos ? std::string::npos : end - at);
  const auto small = [&](const char* key) {
    return static_cast<int>(std::min<std::uint64_t>(number_after(line, key), kMaxShapeValue));
  };
  TrainerModel t;
  t.layers = small("L=");
  t.hidden = small(" C=");
  t.heads = small(" NH=");
  t.max_seq_len = small(" maxT=");
  t.vocab = small(" V=");
  t.params = number_after(line, " (");
  t.batch = small(", batch ");
  t.seq_len = small(" x seq ");
  t.grad_accum = small(" x accum ");
  if (line.find(" parameters)") == std::string::npos) t.params = 0;
  return t;
}

TrainerModel read_trainer_model(const std::string& dir, std::uint32_t round) {
  const fs::path attempt = fs::path(dir) / ("attempt_" + std::to_string(round));
  std::map<unsigned, fs::path> logs;  // by rank: the lowest first
  std::error_code ec;
  for (auto it = fs::directory_iterator(attempt, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string digits = name.size() > 9 ? name.substr(5, name.size() - 9) : "";
    if (name.rfind("rank_", 0) != 0 || name.substr(name.size() - 4) != ".log" || digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;  // rank_<r>_error.json, the stacks folder, anything else
    }
    logs.emplace(static_cast<unsigned>(std::stoul(digits)), it->path());
  }
  std::size_t tried = 0;
  for (const auto& [rank, path] : logs) {
    if (++tried > kMaxLogsTried) break;
    const auto text = read_bounded_file(path.string(), FileBound{kMaxTrainerLogBytes, true});
    if (!text.ok()) continue;
    const TrainerModel t = parse_trainer_model(text.value);
    if (t.params > 0) return t;
  }
  return {};
}

void derive_trainer_states(MeasuredRun& run) {
  MeasuredMemory& m = run.memory;
  if (!run.trainer || run.precision != "fp32" || run.model.params == 0 || m.states != StatesSource::not_recorded) {
    return;
  }
  const std::uint64_t p = run.model.params;
  const std::uint64_t n = std::max<std::uint64_t>(run.ranks, 1);
  const auto shard = [&](std::uint64_t bytes, int from_stage) {
    return run.zero_stage >= from_stage ? bytes / n : bytes;
  };
  m.optim_bytes = shard(8 * p, 1);
  m.grads_bytes = shard(4 * p, 2);
  m.params_bytes = shard(4 * p, 3);
  m.states = StatesSource::derived;
}

}  // namespace dtrain::plan

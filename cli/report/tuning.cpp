#include "cli/report/tuning.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/report/svg.h"
#include "common/io/bounded_file.h"

namespace dtrain::report {

// Named, not anonymous: the library is compiled in unity batches with the page's other files.
namespace tune_json {

namespace fs = std::filesystem;
using nlohmann::json;

// `text` cut to kMaxTuneTextBytes, at a UTF-8 character boundary.
std::string clip(std::string text) {
  if (text.size() <= kMaxTuneTextBytes) return text;
  std::size_t cut = kMaxTuneTextBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

// A field of `object` (a JSON object), or nullptr when absent.
const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string text_of(const json& object, const char* key) {
  const json* value = field(object, key);
  return value != nullptr && value->is_string() ? clip(value->get<std::string>()) : std::string();
}

// A finite number; none when absent, of another type, or not finite (1e999 parses as infinity).
std::optional<double> number_of(const json& value) {
  if (!value.is_number()) return std::nullopt;
  const double number = value.get<double>();
  return std::isfinite(number) ? std::optional<double>(number) : std::nullopt;
}

std::optional<double> number_of(const json& object, const char* key) {
  const json* value = field(object, key);
  return value == nullptr ? std::nullopt : number_of(*value);
}

// A finite number that is not negative: counts, durations, sizes.
std::optional<double> count_of(const json& object, const char* key) {
  const auto number = number_of(object, key);
  return number && *number >= 0 ? number : std::nullopt;
}

std::optional<std::uint64_t> ms_of(const json& object, const char* key) {
  const auto number = count_of(object, key);
  return number && *number < 9e15 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(*number)) : std::nullopt;
}

// The strings of an array field (other entries skipped), at most kMaxTuneListEntries.
std::vector<std::string> texts_of(const json& object, const char* key) {
  std::vector<std::string> out;
  const json* value = field(object, key);
  if (value == nullptr || !value->is_array()) return out;
  for (const auto& entry : *value) {
    if (out.size() == kMaxTuneListEntries) break;
    if (entry.is_string()) out.push_back(clip(entry.get<std::string>()));
  }
  return out;
}

TuneCandidate candidate_of(const json& c) {
  TuneCandidate out;
  if (!c.is_object()) return out;
  out.name = text_of(c, "name");
  out.status = text_of(c, "status");
  out.trials = count_of(c, "trials");
  out.rate = count_of(c, "rate");
  out.speedup = count_of(c, "speedup");
  if (const json* ci = field(c, "ci"); ci != nullptr && ci->is_array() && ci->size() == 2) {
    const auto lo = number_of((*ci)[0]), hi = number_of((*ci)[1]);
    if (lo && hi) out.ci = std::make_pair(*lo, *hi);
  }
  out.data_wait_ms = count_of(c, "data_wait_ms");
  out.comm_ms = count_of(c, "comm_ms");
  out.memory_bytes = count_of(c, "memory_bytes");
  out.loss_check = text_of(c, "loss_check");
  out.note = text_of(c, "note");
  return out;
}

void read_candidates(TuneSummary& tune, const json& root) {
  const json* list = field(root, "candidates");
  if (list == nullptr || !list->is_array()) return;
  for (const auto& c : *list) {
    if (tune.candidates.size() == kMaxTuneCandidates) {
      ++tune.candidates_left_out;
    } else {
      tune.candidates.push_back(candidate_of(c));
    }
  }
  const json* recommended = field(root, "recommended");
  if (recommended != nullptr && recommended->is_number_integer()) {
    const auto index = recommended->get<std::int64_t>();
    if (index >= 0 && index < static_cast<std::int64_t>(tune.candidates.size())) {
      tune.recommended = static_cast<int>(index);
    }
  }
}

TuneSummary summary_of(const json& root) {
  TuneSummary tune;
  tune.job = text_of(root, "job");
  tune.command = texts_of(root, "command");
  tune.started_ms = ms_of(root, "started_ms");
  tune.ended_ms = ms_of(root, "ended_ms");
  tune.budget_s = count_of(root, "budget_s");
  tune.warmup_steps = count_of(root, "warmup_steps");
  tune.trial_steps = count_of(root, "trial_steps");
  tune.repeats = count_of(root, "repeats");
  tune.ranks = count_of(root, "ranks");
  tune.trials_run = count_of(root, "trials_run");
  tune.ended = text_of(root, "ended");
  tune.unit = text_of(root, "unit");
  tune.bottleneck = text_of(root, "bottleneck");
  if (const json* shares = field(root, "shares"); shares != nullptr && shares->is_object()) {
    for (const auto& [name, value] : shares->items()) {
      const auto share = number_of(value);
      if (share && tune.shares.size() < 16) tune.shares.emplace_back(clip(name), *share);
    }
  }
  tune.baseline_run = text_of(root, "baseline_run");
  read_candidates(tune, root);
  tune.verdict = text_of(root, "verdict");
  tune.lines = texts_of(root, "lines");
  tune.suggestions = texts_of(root, "suggestions");
  tune.tune_yaml = text_of(root, "tune_yaml");
  return tune;
}

}  // namespace tune_json

namespace tune_html {

std::string number_text(const std::optional<double>& value, const std::string& unit = "") {
  return value ? pretty(*value) + unit : "-";
}

// Two decimals; a value too large for them (only a hostile file has one) as pretty() writes it.
std::string fixed2(double value) {
  if (std::fabs(value) >= 1e6) return pretty(value);
  char text[48];
  std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

std::string rate_unit(const std::string& unit) {
  return unit == "tokens" || unit == "samples" || unit == "steps" ? unit + "/s" : "units/s";
}

// "1.42x [1.30, 1.55]"; the baseline is the unit.
std::string speedup_text(const TuneCandidate& c, bool baseline) {
  if (baseline) return "1 (baseline)";
  if (!c.speedup) return "-";
  std::string out = fixed2(*c.speedup) + "x";
  if (c.ci) out += " [" + fixed2(c.ci->first) + ", " + fixed2(c.ci->second) + "]";
  return out;
}

std::string memory_text(const std::optional<double>& bytes) {
  if (!bytes) return "-";
  return *bytes >= 1e9 ? pretty(*bytes / 1e9) + "&nbsp;GB" : pretty(*bytes / 1e6) + "&nbsp;MB";
}

std::string status_text(const TuneCandidate& c) {
  std::string out = escape(c.status.empty() ? "unknown" : c.status);
  return c.note.empty() ? out : out + ": " + escape(c.note);
}

std::string row(const TuneSummary& tune, std::size_t index, const std::string& rank) {
  const TuneCandidate& c = tune.candidates[index];
  const bool recommended = tune.recommended == static_cast<int>(index);
  std::string name = escape(c.name.empty() ? "(unnamed)" : c.name);
  if (recommended) name = "<b>" + name + "</b> <b class=\"recommended-mark\">(recommended)</b>";
  std::string out = "<tr data-candidate=\"" + std::to_string(index) + "\"" +
                    (recommended ? " class=\"recommended\" data-recommended=\"1\"" : "") + ">";
  const auto cell = [&out](const std::string& html) { out += "<td>" + html + "</td>"; };
  // No rate: no trial measured anything (failed, timed out, not run), and its zeros say nothing either.
  const bool measured = c.rate && *c.rate > 0;
  cell(rank);
  cell(name);
  cell(measured ? pretty(*c.rate) + "&nbsp;" + rate_unit(tune.unit) : "-");
  cell(measured || index == 0 ? speedup_text(c, index == 0) : "-");
  cell(measured ? number_text(c.data_wait_ms, "&nbsp;ms") : "-");
  cell(measured ? number_text(c.comm_ms, "&nbsp;ms") : "-");
  cell(measured ? memory_text(c.memory_bytes) : "-");
  cell(escape(c.loss_check.empty() ? "-" : c.loss_check));
  cell(status_text(c));
  return out + "</tr>";
}

std::string table(const TuneSummary& tune) {
  if (tune.candidates.empty()) return "<p class=\"empty\">tune.json lists no candidate.</p>";
  std::string out = "<table class=\"marks\" id=\"tune-table\"><tr><th>#</th><th>knobs</th><th>rate</th>"
                    "<th>speed-up [95% interval]</th><th>data wait</th><th>exposed comm</th><th>memory</th>"
                    "<th>loss check</th><th>status</th></tr>";
  std::size_t ranked = 0;
  for (const std::size_t index : tune_ranking(tune)) {
    const TuneCandidate& c = tune.candidates[index];
    const bool measured = c.status == "measured" && (c.speedup || index == 0);
    out += row(tune, index, measured ? std::to_string(++ranked) : "-");
  }
  out += "</table>";
  if (tune.candidates_left_out > 0) {
    out += "<p class=\"note\">" + std::to_string(tune.candidates_left_out) + " more candidates not shown (the " +
           "table shows the first " + std::to_string(kMaxTuneCandidates) + ").</p>";
  }
  return out + "<p class=\"note\">Speed-up: the candidate's rate over the baseline's (the median of its trials), " +
         "with its 95% interval; data wait and exposed communication: the median per step per rank.</p>";
}

std::string trials_text(const TuneSummary& tune) {
  std::string out = number_text(tune.warmup_steps) + " warm-up steps, then " + number_text(tune.trial_steps) +
                    " measured steps; " + number_text(tune.repeats) + " repeats of each candidate";
  return tune.ranks ? out + "; " + pretty(*tune.ranks) + " ranks" : out;
}

std::string bottleneck_text(const TuneSummary& tune) {
  std::string out = escape(tune.bottleneck.empty() ? "not known" : tune.bottleneck);
  std::string shares;
  for (const auto& [name, share] : tune.shares) {
    shares += (shares.empty() ? "" : ", ") + escape(name) + " " + pretty(share * 100) + "%";
  }
  return shares.empty() ? out : out + " (of a step: " + shares + ")";
}

std::string settings(const TuneSummary& tune) {
  std::string out = "<table class=\"summary\" id=\"tune-settings\">";
  const auto add = [&out](const std::string& key, const std::string& html) {
    out += "<tr><td>" + key + "</td><td>" + html + "</td></tr>";
  };
  if (!tune.job.empty()) add("job", escape(tune.job));
  std::string command;
  for (const auto& word : tune.command) command += (command.empty() ? "" : " ") + word;
  if (!command.empty()) add("command", "<code>" + escape(command) + "</code>");
  add("trials", trials_text(tune));
  add("budget", tune.budget_s && *tune.budget_s < 1e12
                    ? duration_text(static_cast<std::uint64_t>(*tune.budget_s * 1000)) : "-");
  const bool timed = tune.started_ms && tune.ended_ms && *tune.ended_ms >= *tune.started_ms;
  add("time taken", timed ? duration_text(*tune.ended_ms - *tune.started_ms) : "-");
  if (tune.trials_run) add("trials run", number_text(*tune.trials_run));
  if (!tune.ended.empty()) add("ended early", escape(tune.ended));
  add("bottleneck", bottleneck_text(tune));
  if (!tune.baseline_run.empty()) add("baseline run", "<code>" + escape(tune.baseline_run) + "</code>");
  return out + "</table>";
}

std::string advice(const TuneSummary& tune) {
  std::string out = "<p id=\"tune-verdict\"><b>" +
                    (tune.verdict.empty() ? std::string("tune.json has no verdict.") : escape(tune.verdict)) +
                    "</b></p>";
  if (!tune.lines.empty()) {
    std::string lines;
    for (const auto& line : tune.lines) lines += escape(line) + "\n";
    out += "<p>To keep it, put this in the script:</p><pre id=\"tune-lines\">" + lines + "</pre>";
  }
  if (!tune.tune_yaml.empty()) {
    out += "<p>Or run the job with the overlay: <code>--tune " + escape(tune.tune_yaml) + "</code> (in the tune " +
           "directory) on <code>dtrain launch</code> or <code>dtrain run</code>.</p>";
  }
  if (!tune.suggestions.empty()) {
    out += "<p>Not tried (they change the numerics; try them yourself):</p><ul id=\"tune-suggestions\">";
    for (const auto& s : tune.suggestions) out += "<li>" + escape(s) + "</li>";
    out += "</ul>";
  }
  return out;
}

}  // namespace tune_html

bool is_tune_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / kTuneFileName, ec)) return false;
  // A launched job's log starts with job_start, a few hundred bytes; tune's starts with tune_start.
  auto log = LineReader::open((fs::path(dir) / "events.jsonl").string(), 64 * 1024);
  if (!log.ok()) return log.status.code() == StatusCode::not_found;
  std::string line;
  if (!log.value.next(line)) return true;
  const auto first = nlohmann::json::parse(line, nullptr, false);
  const auto event = first.is_object() ? first.find("event") : first.end();
  return event == first.end() || *event != "job_start";
}

Result<TuneSummary> read_tune(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kTuneFileName).string();
  const auto text = read_bounded_file(path, FileBound{kMaxTuneFileBytes});
  if (!text.ok()) {
    const std::string why = text.status.code() == StatusCode::invalid_argument
                                ? ": `dtrain tune` writes tune.json as a file of a few KB (at most 1 MiB is read)"
                                : "";
    return {{text.status.code(), text.status.message() + why}};
  }
  const auto root = nlohmann::json::parse(text.value, nullptr, false);
  if (!root.is_object()) {
    return {{StatusCode::invalid_argument, path + " is not a JSON object (or not JSON): `dtrain tune` writes its " +
                                               "result there; run it again to write a new one"}};
  }
  return {{}, tune_json::summary_of(root)};
}

Result<std::string> baseline_run_dir(const std::string& dir, const std::string& baseline_run) {
  namespace fs = std::filesystem;
  const fs::path relative(baseline_run);
  const std::string refused = "the baseline run's path \"" + baseline_run + "\" in " + kTuneFileName + " is refused";
  if (baseline_run.empty()) {
    return {{StatusCode::invalid_argument, std::string(kTuneFileName) + " names no baseline run (baseline_run)"}};
  }
  if (relative.has_root_path() || baseline_run.find('\0') != std::string::npos) {
    return {{StatusCode::invalid_argument, refused + ": it must be relative to the tune directory"}};
  }
  for (const auto& part : relative) {
    if (part == "..") return {{StatusCode::invalid_argument, refused + ": it leaves the tune directory (..)"}};
  }
  if (relative.lexically_normal() == ".") {
    return {{StatusCode::invalid_argument, refused + ": it names the tune directory itself"}};
  }
  return {{}, (fs::path(dir) / relative).string()};
}

std::vector<std::size_t> tune_ranking(const TuneSummary& tune) {
  std::vector<std::size_t> measured, others;
  for (std::size_t i = 0; i < tune.candidates.size(); ++i) {
    const TuneCandidate& c = tune.candidates[i];
    (c.status == "measured" && (c.speedup || i == 0) ? measured : others).push_back(i);
  }
  const auto speedup = [&tune](std::size_t i) {
    return i == 0 ? 1.0 : *tune.candidates[i].speedup;
  };
  std::stable_sort(measured.begin(), measured.end(),
                   [&](std::size_t a, std::size_t b) { return speedup(a) > speedup(b); });
  measured.insert(measured.end(), others.begin(), others.end());
  return measured;
}

std::string tuning_section(const TuneSummary& tune, const std::string& note) {
  std::string out = "<section id=\"tuning\"><h2>Tuning</h2>";
  if (!note.empty()) out += "<p class=\"note\" id=\"tune-note\">" + escape(note) + "</p>";
  return out + tune_html::table(tune) + tune_html::advice(tune) + tune_html::settings(tune) + "</section>";
}

}  // namespace dtrain::report

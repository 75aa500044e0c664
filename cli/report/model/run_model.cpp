#include "cli/report/model/run_model.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/io/bounded_file.h"

namespace dtrain::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A run directory's file that the reader refused (`refused`: a FIFO, a device, too large), as the user reads it.
Status not_a_run_file(const Status& refused, const std::string& what) {
  return {StatusCode::invalid_argument, refused.message() + ": a launcher writes a job's " + what + " there as a " +
                                            "file; pass the directory of a dtrain job"};
}

// `text` cut to kMaxKeptTextBytes, at a UTF-8 character boundary.
std::string clipped(std::string text) {
  if (text.size() <= kMaxKeptTextBytes) return text;
  std::size_t cut = kMaxKeptTextBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

// The event of a line, from its head ({"ts":N,"event":"NAME",...}) without parsing it: a health event holds every
// rank's full row and is the bulk of a long job's log, and the page needs none of it (the samples events carry the
// same numbers per window); samples lines have their own reader.
bool line_is(std::string_view line, std::string_view event) {
  const std::string_view head = line.substr(0, 64);
  const std::size_t at = head.find("\"event\":\"");
  return at != std::string_view::npos && head.substr(at + 9).substr(0, event.size() + 1) == std::string(event) + "\"";
}

RoundInfo* round_of(RunModel& model, std::uint32_t number) {
  for (auto& r : model.rounds) {
    if (r.number == number) return &r;
  }
  return nullptr;
}

DiagnosisInfo diagnosis_of(const json& d) {
  DiagnosisInfo info{clipped(d.value("kind", "")), {}, clipped(d.value("message", "")), clipped(d.value("fix", ""))};
  if (const auto it = d.find("ranks"); it != d.end() && it->is_array()) {
    for (const auto& r : *it) {
      if (r.is_number_unsigned() && info.ranks.size() < kMaxSampleRanks) info.ranks.push_back(r.get<unsigned>());
    }
  }
  return info;
}

void apply_round_end(RunModel& model, const json& e, std::uint64_t ts) {
  RoundInfo* round = round_of(model, e.value("round", 0u));
  if (round == nullptr) return;
  round->end_ms = ts;
  round->outcome = e.value("outcome", "");
  if (const auto it = e.find("root_cause"); it != e.end() && it->is_object()) {
    round->root_cause = clipped("rank " + std::to_string(it->value("rank", 0u)) + " on node " +
                                std::to_string(it->value("node", 0u)) + " (" + it->value("host", "") + "): " +
                                it->value("what", ""));
  } else if (const auto lost = e.find("node_failure"); lost != e.end() && lost->is_string()) {
    round->root_cause = clipped(lost->get<std::string>());
  }
}

void add_mark(RunModel& model, Mark::Kind kind, std::uint64_t ms, std::uint32_t round, std::string text) {
  if (model.marks.size() < kMaxKeptMarks) model.marks.push_back({kind, ms, round, clipped(std::move(text))});
}

void apply_event(RunModel& model, const json& e, std::vector<DiagnosisInfo>& logged) {
  const std::string name = e.value("event", "");
  const std::uint64_t ts = e.value("ts", std::uint64_t{0});
  const std::uint32_t round = e.value("round", model.rounds.empty() ? 0u : model.rounds.back().number);
  if (name == "job_start") {
    model.job_id = clipped(e.value("job", ""));
    model.name = clipped(e.value("name", ""));
    model.start_ms = ts;
    if (const auto it = e.find("command"); it != e.end() && it->is_array()) {
      for (const auto& arg : *it) model.command.push_back(arg.is_string() ? arg.get<std::string>() : arg.dump());
    }
  } else if (name == "round_start") {
    if (model.rounds.size() < kMaxKeptRounds) {
      model.rounds.push_back(RoundInfo{round, ts, 0, e.value("nodes", std::size_t{0}), "", ""});
    }
  } else if (name == "round_end") {
    apply_round_end(model, e, ts);
  } else if (name == "worker_started") {
    if (const unsigned rank = e.value("rank", 0u); rank < kMaxSampleRanks) model.node_of[rank] = e.value("node", 0u);
  } else if (name == "worker_exited" && e.value("outcome", "") == "failed") {
    add_mark(model, Mark::Kind::worker_failed, ts, round,
             "rank " + std::to_string(e.value("rank", 0u)) + " " + e.value("exit", "failed"));
  } else if (name == "node_lost") {
    add_mark(model, Mark::Kind::node_lost, ts, round, e.value("what", "a node was lost"));
  } else if (name == "health_check_failed") {
    add_mark(model, Mark::Kind::hang, ts, round, e.value("what", "a health check failed"));
  } else if (name == "diagnosis") {
    if (logged.size() < kMaxKeptMarks) logged.push_back(diagnosis_of(e));
    add_mark(model, Mark::Kind::diagnosis, ts, round, e.value("kind", "") + ": " + e.value("message", ""));
  } else if (name == "job_end") {
    model.end_ms = ts;
    model.outcome = e.value("outcome", "unknown");
    model.exit_code = e.value("exit_code", 0);
  }
  if (model.outcome == "unknown") model.end_ms = std::max(model.end_ms, ts);
}

// A number of the snapshot's top level, none when absent, null or not a number.
std::optional<double> status_number(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
}

std::string status_text(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? clipped(it->get<std::string>()) : std::string();
}

// A small count of a status.json rank row (a rank, a grid place or size); 0 when missing or not one.
unsigned grid_number(const json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_number_unsigned() && it->get<std::uint64_t>() <= kMaxSampleRanks
             ? it->get<unsigned>()
             : 0;
}

// status.json: the hosts of the nodes, the ranks' places in a grid that splits the model (at most kMaxSampleRanks),
// the diagnoses the launcher ended with (with their fixes), the model FLOP/s.
// Missing or not JSON (a launcher killed while writing it) it adds nothing; a FIFO, a device or an oversized file is
// refused (invalid_argument).
Status read_status(RunModel& model, const fs::path& path) {
  const auto text = read_bounded_file(path.string(), FileBound{kMaxStatusFileBytes});
  if (text.status.code() == StatusCode::invalid_argument) return not_a_run_file(text.status, "last snapshot");
  const json status = json::parse(text.value, nullptr, false);
  if (!text.ok() || !status.is_object()) return {};
  if (const auto nodes = status.find("nodes"); nodes != status.end() && nodes->is_array()) {
    for (const auto& n : *nodes) model.hosts[n.value("node", 0u)] = clipped(n.value("host", ""));
  }
  if (const auto ranks = status.find("ranks"); ranks != status.end() && ranks->is_array()) {
    for (const auto& r : *ranks) {
      if (!r.is_object() || model.grid_of.size() >= kMaxSampleRanks) continue;
      const GridPlace place{grid_number(r, "tp_rank"), grid_number(r, "tp_size"), grid_number(r, "pp_stage"),
                            grid_number(r, "pp_size")};
      if (place.split()) model.grid_of[grid_number(r, "rank")] = place;
    }
  }
  if (const auto d = status.find("diagnoses"); d != status.end() && d->is_array()) {
    for (const auto& one : *d) {
      if (model.diagnoses.size() < kMaxKeptMarks) model.diagnoses.push_back(diagnosis_of(one));
    }
  }
  model.model_flops = {status_number(status, "model_flops_per_s"), status_number(status, "mfu"),
                       status_text(status, "flops_basis"), status_text(status, "peak_basis")};
  return {};
}

void find_stacks(RunModel& model) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(model.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.parent_path().filename() == "stacks" && p.extension() == ".txt" &&
        p.filename().string().find(".dump.") == std::string::npos && model.stacks_files.size() < kMaxStacksFiles) {
      model.stacks_files.push_back(fs::relative(p, model.dir).string());
    }
  }
  std::sort(model.stacks_files.begin(), model.stacks_files.end());
}

// A samples line kept within kMaxKeptRankSamples and kMaxKeptPoints; `kept` counts the rank samples held, `points`
// the points.
void keep_samples(RunModel& model, SampleWindow window, std::size_t& kept, std::size_t& points) {
  model.end_ms = std::max(model.end_ms, window.end_ms);
  if (points + window.points.size() > kMaxKeptPoints) window.points.clear();
  points += window.points.size();
  kept += window.ranks.size();
  model.samples.push_back(std::move(window));
  if (kept <= kMaxKeptRankSamples) return;
  merge_pairs(model.samples);
  kept = 0;
  for (const auto& w : model.samples) kept += w.ranks.size();
  // Windows of different rounds are never merged: with nothing left to merge, the newest is not kept.
  while (kept > kMaxKeptRankSamples) {
    kept -= model.samples.back().ranks.size();
    model.samples.pop_back();
  }
}

}  // namespace

std::vector<unsigned> RunModel::stragglers() const {
  std::set<unsigned> found;
  for (const auto& d : diagnoses) {
    if (d.kind == "straggler") found.insert(d.ranks.begin(), d.ranks.end());
  }
  return {found.begin(), found.end()};
}

Result<RunModel> read_run(const std::string& dir) {
  const std::string events = (fs::path(dir) / "events.jsonl").string();
  auto reader = LineReader::open(events, kMaxEventLineBytes);
  if (reader.status.code() == StatusCode::invalid_argument) return {not_a_run_file(reader.status, "event log")};
  if (!reader.ok()) {
    return {{StatusCode::not_found, "no event log at " + events + " (" + reader.status.message() +
                                        "): pass the directory of a job that dtrain launched (<logs.dir>/<job id>)"}};
  }
  RunModel model;
  model.dir = dir;
  std::vector<DiagnosisInfo> logged;
  std::size_t kept = 0, points = 0;
  std::string line;
  while (reader.value.next(line)) {
    if (line.empty() || line_is(line, "health")) continue;
    if (line_is(line, "samples")) {
      keep_samples(model, read_samples(line), kept, points);
      continue;
    }
    const json e = json::parse(line, nullptr, false);
    if (e.is_object()) apply_event(model, e, logged);
  }
  if (!reader.value.status().ok()) return {reader.value.status()};
  if (Status status = read_status(model, fs::path(dir) / "status.json"); !status.ok()) return {status};
  if (model.diagnoses.empty()) model.diagnoses = std::move(logged);
  find_stacks(model);
  return {{}, std::move(model)};
}

}  // namespace dtrain::report

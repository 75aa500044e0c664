#include "cli/report/run_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

namespace dtrain::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return "";
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  return text;
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
  DiagnosisInfo info{d.value("kind", ""), {}, d.value("message", ""), d.value("fix", "")};
  if (const auto it = d.find("ranks"); it != d.end() && it->is_array()) {
    for (const auto& r : *it) {
      if (r.is_number_unsigned()) info.ranks.push_back(r.get<unsigned>());
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
    round->root_cause = "rank " + std::to_string(it->value("rank", 0u)) + " on node " +
                        std::to_string(it->value("node", 0u)) + " (" + it->value("host", "") + "): " +
                        it->value("what", "");
  } else if (const auto lost = e.find("node_failure"); lost != e.end() && lost->is_string()) {
    round->root_cause = lost->get<std::string>();
  }
}

void apply_event(RunModel& model, const json& e, std::vector<DiagnosisInfo>& logged) {
  const std::string name = e.value("event", "");
  const std::uint64_t ts = e.value("ts", std::uint64_t{0});
  const std::uint32_t round = e.value("round", model.rounds.empty() ? 0u : model.rounds.back().number);
  if (name == "job_start") {
    model.job_id = e.value("job", "");
    model.name = e.value("name", "");
    model.start_ms = ts;
    if (const auto it = e.find("command"); it != e.end() && it->is_array()) {
      for (const auto& arg : *it) model.command.push_back(arg.is_string() ? arg.get<std::string>() : arg.dump());
    }
  } else if (name == "round_start") {
    model.rounds.push_back(RoundInfo{round, ts, 0, e.value("nodes", std::size_t{0}), "", ""});
  } else if (name == "round_end") {
    apply_round_end(model, e, ts);
  } else if (name == "worker_started") {
    model.node_of[e.value("rank", 0u)] = e.value("node", 0u);
  } else if (name == "worker_exited" && e.value("outcome", "") == "failed") {
    model.marks.push_back({Mark::Kind::worker_failed, ts, round,
                           "rank " + std::to_string(e.value("rank", 0u)) + " " + e.value("exit", "failed")});
  } else if (name == "node_lost") {
    model.marks.push_back({Mark::Kind::node_lost, ts, round, e.value("what", "a node was lost")});
  } else if (name == "health_check_failed") {
    model.marks.push_back({Mark::Kind::hang, ts, round, e.value("what", "a health check failed")});
  } else if (name == "diagnosis") {
    logged.push_back(diagnosis_of(e));
    model.marks.push_back({Mark::Kind::diagnosis, ts, round, e.value("kind", "") + ": " + e.value("message", "")});
  } else if (name == "job_end") {
    model.end_ms = ts;
    model.outcome = e.value("outcome", "unknown");
    model.exit_code = e.value("exit_code", 0);
  }
  if (model.outcome == "unknown") model.end_ms = std::max(model.end_ms, ts);
}

// status.json: the hosts of the nodes and the diagnoses the launcher ended with (with their fixes).
void read_status(RunModel& model, const fs::path& path) {
  const json status = json::parse(read_file(path), nullptr, false);
  if (!status.is_object()) return;
  if (const auto nodes = status.find("nodes"); nodes != status.end() && nodes->is_array()) {
    for (const auto& n : *nodes) model.hosts[n.value("node", 0u)] = n.value("host", "");
  }
  if (const auto d = status.find("diagnoses"); d != status.end() && d->is_array()) {
    for (const auto& one : *d) model.diagnoses.push_back(diagnosis_of(one));
  }
}

void find_stacks(RunModel& model) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(model.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.parent_path().filename() == "stacks" && p.extension() == ".txt" &&
        p.filename().string().find(".dump.") == std::string::npos) {
      model.stacks_files.push_back(fs::relative(p, model.dir).string());
    }
  }
  std::sort(model.stacks_files.begin(), model.stacks_files.end());
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
  const fs::path events = fs::path(dir) / "events.jsonl";
  std::error_code ec;
  if (!fs::is_regular_file(events, ec)) {
    return {{StatusCode::not_found, "no event log at " + events.string() +
                                        ": pass the directory of a job that dtrain launched (<logs.dir>/<job id>)"}};
  }
  RunModel model;
  model.dir = dir;
  std::vector<DiagnosisInfo> logged;
  const std::string text = read_file(events);
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find('\n'), rest.size());
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(std::min(end + 1, rest.size()));
    if (line.empty() || line_is(line, "health")) continue;
    if (line_is(line, "samples")) {
      model.samples.push_back(read_samples(line));
      model.end_ms = std::max(model.end_ms, model.samples.back().end_ms);
      continue;
    }
    const json e = json::parse(line, nullptr, false);
    if (e.is_object()) apply_event(model, e, logged);
  }
  read_status(model, fs::path(dir) / "status.json");
  if (model.diagnoses.empty()) model.diagnoses = std::move(logged);
  find_stacks(model);
  return {{}, std::move(model)};
}

}  // namespace dtrain::report

// The rules a Spec must satisfy whatever it was built from: ranges, names, and rules between keys.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "cli/spec/checks.h"
#include "cli/spec/env_names.h"
#include "cli/spec/host_syntax.h"
#include "cli/spec/locations.h"

namespace dtrain::spec {

namespace detail {
namespace {

bool valid_job_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// "Tiny_GPT v2" -> "tiny-gpt-v2"
std::string job_name_like(std::string_view name) {
  std::string out;
  for (const char c : name) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) out += l;
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

}  // namespace

void Reporter::report(const std::string& path, std::string message, std::string hint) {
  if (!where_.is_broken(path)) out_.push_back(where_.at(path, std::move(message), std::move(hint)));
}

void Reporter::duration(const std::string& path, double value, bool zero_ok) {
  if (!std::isfinite(value)) {
    report(path, "must be a finite number of seconds.");
  } else if (value < 0 && zero_ok) {
    report(path, "must be >= 0, got " + shortest_number(value) + ".", "Use 0 to turn it off.");
  } else if (value <= 0 && !zero_ok) {
    report(path, "must be > 0, got " + shortest_number(value) + ".");
  } else if (value > kMaxDurationS) {
    report(path,
           "must be at most " + shortest_number(kMaxDurationS) + " seconds (7 days), got " + shortest_number(value) +
               ".",
           zero_ok ? "Use 0 to turn it off." : "");
  }
}

void Reporter::duration_from(const std::string& path, double value, double least, const std::string& why) {
  if (std::isfinite(value) && value > kMaxDurationS) {
    duration(path, value, false);
  } else if (!std::isfinite(value) || !(value >= least)) {
    report(path,
           "must be at least " + shortest_number(least) + " seconds, got " + shortest_number(value) + ": " + why + ".",
           "Give " + shortest_number(least) + " or more.");
  }
}

bool Reporter::no_nul(const std::string& path, const std::string& value) {
  if (value.find('\0') == std::string::npos) return true;
  report(path, "contains a NUL byte (\\0), which no argument, variable or path can hold.",
         "Remove the \\0 from the value.");
  return false;
}

void Reporter::no_nul(const std::string& path, const std::vector<std::string>& values) {
  for (std::size_t i = 0; i < values.size(); ++i) no_nul(path + "[" + std::to_string(i) + "]", values[i]);
}

namespace {

void check_name(const Spec& spec, Reporter& r) {
  if (spec.name.empty()) {
    r.report("name", "is empty.", "Example: name: tiny-gpt");
  } else if (!valid_job_name(spec.name)) {
    const std::string like = job_name_like(spec.name).substr(0, kMaxNameLength);
    r.report("name", "'" + spec.name + "' is not a valid job name: use lowercase letters, digits and '-'.",
             like.empty() ? "Example: name: tiny-gpt" : "Did you mean '" + like + "'?");
  } else if (spec.name.size() > kMaxNameLength) {
    r.report("name",
             "is " + std::to_string(spec.name.size()) + " characters long; a job name has at most " +
                 std::to_string(kMaxNameLength) + " (it names the job's log directory).",
             "Shorten it, e.g. '" + spec.name.substr(0, 32) + "'.");
  }
}

void check_workers_and_command(const Spec& spec, Reporter& r) {
  const auto& wpn = spec.workers_per_node;
  if (wpn.kind == Spec::WorkersPerNode::Kind::count && wpn.count < 1) {
    r.report("workers_per_node", "must be at least 1, got " + std::to_string(wpn.count) + ".",
             "Use an integer >= 1, gpu (one per GPU) or cpu (one per CPU).");
  } else if (wpn.kind == Spec::WorkersPerNode::Kind::count && wpn.count > kMaxWorkersPerNode) {
    r.report("workers_per_node",
             "must be at most " + std::to_string(kMaxWorkersPerNode) + ", got " + std::to_string(wpn.count) + ".");
  } else if (wpn.kind == Spec::WorkersPerNode::Kind::count && !r.is_broken("nodes.count") &&
             spec.nodes.max_count >= 1 && spec.nodes.max_count <= kMaxNodes &&
             static_cast<long long>(spec.nodes.max_count) * wpn.count > kMaxWorldSize) {
    r.report("workers_per_node",
             std::to_string(wpn.count) + " workers on each of " + std::to_string(spec.nodes.max_count) +
                 " nodes make " + std::to_string(static_cast<long long>(spec.nodes.max_count) * wpn.count) +
                 " ranks; a job has at most " + std::to_string(kMaxWorldSize) + ".",
             "Lower workers_per_node or nodes.count.");
  }
  const auto& command = spec.command;
  if (spec.shell && command.size() == 1) r.no_nul("command", command[0]);
  else r.no_nul("command", command);
  if (command.empty()) {
    r.report("command", "is empty.", "Example: command: [python3, train.py]");
  } else if (spec.shell && command.size() > 1) {
    std::string joined;
    for (const auto& word : command) joined += (joined.empty() ? "" : " ") + word;
    r.report("command",
             "with shell: true, command must be one string, got a list of " + std::to_string(command.size()) + ".",
             "Write it as one string: command: \"" + joined + "\"");
  } else if (command[0].empty()) {
    r.report(command.size() == 1 && spec.shell ? "command" : "command[0]", "the program to run is empty.",
             "Example: command: [python3, train.py]");
  }
}

void check_env(const std::string& section, const std::map<std::string, std::string>& env, Reporter& r) {
  for (const auto& [name, value] : env) {
    const std::string path = section + "." + name;
    if (!valid_env_name(name)) {
      r.report(path, "'" + name + "' is not an environment variable name.",
               "Use letters, digits and '_', not starting with a digit.");
    } else if (is_reserved_env(name)) {
      r.report(path, name + " is set by dtrain for every worker and cannot be overridden.",
               "Remove it; ranks, sizes and addresses follow from nodes and workers_per_node.");
    } else {
      r.no_nul(path, value);
    }
  }
}

void check_console(const Spec& spec, Reporter& r) {
  const auto& logs = spec.logs;
  if (logs.console != Spec::Logs::Console::ranks) return;
  if (logs.console_ranks.empty() && !r.is_broken("logs.console")) {
    r.report("logs.console", "lists no rank.", "Use console: none to show no rank.");
  }
  // The world size is known here only for a fixed node count and an integer workers_per_node; otherwise
  // make_plan warns about ranks that do not exist.
  const auto& wpn = spec.workers_per_node;
  const bool world_known = wpn.kind == Spec::WorkersPerNode::Kind::count && wpn.count >= 1 &&
                           !r.is_broken("workers_per_node") && !r.is_broken("nodes.count") &&
                           spec.nodes.min_count >= 1 && spec.nodes.min_count == spec.nodes.max_count;
  const long long world = static_cast<long long>(spec.nodes.min_count) * wpn.count;
  for (std::size_t i = 0; i < logs.console_ranks.size(); ++i) {
    const int rank = logs.console_ranks[i];
    const std::string path = "logs.console[" + std::to_string(i) + "]";
    if (rank < 0) {
      r.report(path, "ranks are >= 0, got " + std::to_string(rank) + ".");
    } else if (world_known && rank >= world) {
      r.report(path, "rank " + std::to_string(rank) + " does not exist: the job has " +
                         (world == 1 ? std::string("1 rank (0)")
                                     : std::to_string(world) + " ranks (0-" + std::to_string(world - 1) + ")") +
                         ".");
    }
  }
}

// Above 1: a rank is compared with its peers, and 1 would name every rank a hair slower than the median. At most
// 100: beyond that no rank is ever named, which is better said by not reading the diagnoses.
void check_straggler_ratio(double ratio, Reporter& r) {
  constexpr double kMaxRatio = 100;
  if (!std::isfinite(ratio) || ratio <= 1 || ratio > kMaxRatio) {
    r.report("health.straggler_ratio", "must be a number above 1 and at most 100, got " + shortest_number(ratio) + ".",
             "1.2 names a rank whose own work per step is more than 20% above the median's.");
  }
}

// The launcher binds it (port 0: any free port); a name it cannot resolve is found only then, and warned about.
void check_metrics_addr(const std::string& address, Reporter& r) {
  if (address.empty() || !r.no_nul("observe.metrics_addr", address)) return;
  if (const Status syntax = check_address(address, true); !syntax.ok()) {
    r.report("observe.metrics_addr", "'" + address + "' " + syntax.message() + ".",
             "Example: metrics_addr: 127.0.0.1:9400 (port 0: any free port; [::1]:9400 for IPv6; leave it out to "
             "serve no metrics)");
  }
}

}  // namespace

void check_spec(const Spec& spec, const Locations& where, std::vector<Diagnostic>& out) {
  Reporter r(where, out);
  check_name(spec, r);
  check_nodes(spec, r);
  check_workers_and_command(spec, r);
  check_env("env", spec.env, r);
  check_env("nccl.env", spec.nccl.env, r);
  if (spec.working_dir.empty()) r.report("working_dir", "is empty.", "Use . for the launcher's directory.");
  r.no_nul("working_dir", spec.working_dir);
  if (spec.restart.max_restarts < 0) {
    r.report("restart.max_restarts", "must be >= 0, got " + std::to_string(spec.restart.max_restarts) + ".");
  } else if (spec.restart.max_restarts > kMaxRestarts) {
    r.report("restart.max_restarts", "must be at most " + std::to_string(kMaxRestarts) + ", got " +
                                         std::to_string(spec.restart.max_restarts) + ".");
  }
  r.duration("restart.backoff_s", spec.restart.backoff_s);
  r.duration("stop.grace_s", spec.stop.grace_s);
  r.duration("health.heartbeat_timeout_s", spec.health.heartbeat_timeout_s);
  r.duration("health.hang_timeout_s", spec.health.hang_timeout_s);
  r.duration("health.startup_timeout_s", spec.health.startup_timeout_s);
  r.duration("health.exit_timeout_s", spec.health.exit_timeout_s);
  r.duration_from("health.node_timeout_s", spec.health.node_timeout_s, kMinNodeTimeoutS,
                  "the agents heartbeat every second until the launcher configures them, and a shorter silence "
                  "would lose every node");
  check_straggler_ratio(spec.health.straggler_ratio, r);
  if (spec.logs.dir.empty()) r.report("logs.dir", "is empty.", "Example: dir: runs");
  r.no_nul("logs.dir", spec.logs.dir);
  check_console(spec, r);
  check_metrics_addr(spec.observe.metrics_addr, r);
}

}  // namespace detail

std::chrono::milliseconds duration_ms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxDurationS) {
    throw std::out_of_range("duration of " + shortest_number(seconds) + " s is outside 0-" +
                            shortest_number(kMaxDurationS) + " s (an unvalidated spec)");
  }
  // At most 6.048e8 ms here, exact in a double and in every integer type it goes into.
  const long long ms = std::llround(seconds * 1000.0);
  return std::chrono::milliseconds(ms == 0 && seconds > 0 ? 1 : ms);
}

std::chrono::milliseconds health_interval(const Spec::Health& health) {
  using std::chrono::milliseconds;
  const milliseconds timeout = duration_ms(health.heartbeat_timeout_s);
  if (timeout.count() == 0) return milliseconds(1000);
  return std::clamp(timeout / 5, milliseconds(100), milliseconds(1000));
}

void validate(const Spec& spec) {
  std::vector<Diagnostic> out;
  detail::check_spec(spec, detail::Locations(spec.source), out);
  detail::throw_if_any(std::move(out));
}

}  // namespace dtrain::spec

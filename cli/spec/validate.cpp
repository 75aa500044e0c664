// The rules a Spec must satisfy whatever it was built from: ranges, names, and rules between keys.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "cli/spec/env_names.h"
#include "cli/spec/locations.h"

namespace dtrain::spec {
namespace detail {
namespace {

std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

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

bool valid_host(std::string_view host) {
  return !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

// Why `address` is not host:port ("" when it is). IPv6 hosts are written in brackets: [fe80::1]:29400.
std::string address_problem(std::string_view address, bool port_zero_ok = false) {
  std::string_view host, port;
  if (address.starts_with('[')) {
    const auto close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return "is not [ipv6]:port";
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
    if (host.empty()) return "has an empty host";
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos) return "has no port";
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return "is ambiguous: write an IPv6 host in brackets";
    if (!valid_host(host)) return "does not start with a host name or address";
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return "does not end in a port number";
  }
  const int value = std::stoi(std::string(port));
  if ((value < 1 && !(port_zero_ok && value == 0)) || value > 65535) return "has a port outside 1-65535";
  return "";
}

// Why `text` is not "[user@]host[:ssh_port]" ("" when it is).
std::string ssh_host_problem(std::string_view text) {
  if (text.empty()) return "is empty";
  const auto at = text.find('@');
  if (at != std::string_view::npos) {
    const std::string_view user = text.substr(0, at);
    if (user.empty() || !std::all_of(user.begin(), user.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
        })) {
      return "has an invalid user name before '@'";
    }
    text = text.substr(at + 1);
  }
  const auto colon = text.find(':');
  if (!valid_host(text.substr(0, colon))) return "is not a host name or IPv4 address";
  if (colon != std::string_view::npos) {
    const std::string_view port = text.substr(colon + 1);
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) {
          return c >= '0' && c <= '9';
        })) {
      return "does not end in an ssh port number after ':'";
    }
    const int value = std::stoi(std::string(port));
    if (value < 1 || value > 65535) return "has an ssh port outside 1-65535";
  }
  return "";
}

class Checker {
 public:
  Checker(const Spec& spec, const Locations& where, std::vector<Diagnostic>& out)
      : spec_(spec), where_(where), out_(out) {}

  void run() {
    check_name();
    check_nodes();
    check_workers_and_command();
    check_env("env", spec_.env);
    check_env("nccl.env", spec_.nccl.env);
    if (spec_.working_dir.empty()) report("working_dir", "is empty.", "Use . for the launcher's directory.");
    no_nul("working_dir", spec_.working_dir);
    if (spec_.restart.max_restarts < 0) {
      report("restart.max_restarts", "must be >= 0, got " + std::to_string(spec_.restart.max_restarts) + ".");
    } else if (spec_.restart.max_restarts > kMaxRestarts) {
      report("restart.max_restarts", "must be at most " + std::to_string(kMaxRestarts) + ", got " +
                                         std::to_string(spec_.restart.max_restarts) + ".");
    }
    duration("restart.backoff_s", spec_.restart.backoff_s);
    duration("stop.grace_s", spec_.stop.grace_s);
    duration("health.heartbeat_timeout_s", spec_.health.heartbeat_timeout_s);
    duration("health.hang_timeout_s", spec_.health.hang_timeout_s);
    duration("health.node_timeout_s", spec_.health.node_timeout_s);
    if (spec_.logs.dir.empty()) report("logs.dir", "is empty.", "Example: dir: runs");
    no_nul("logs.dir", spec_.logs.dir);
    check_console();
  }

 private:
  void report(const std::string& path, std::string message, std::string hint = "") {
    if (!where_.is_broken(path)) out_.push_back(where_.at(path, std::move(message), std::move(hint)));
  }

  // A number of seconds, 0 (off, where 0 is allowed) to kMaxDurationS.
  void duration(const std::string& path, double value, bool zero_ok = true) {
    if (!std::isfinite(value)) {
      report(path, "must be a finite number of seconds.");
    } else if (value < 0 && zero_ok) {
      report(path, "must be >= 0, got " + number(value) + ".", "Use 0 to turn it off.");
    } else if (value <= 0 && !zero_ok) {
      report(path, "must be > 0, got " + number(value) + ".");
    } else if (value > kMaxDurationS) {
      report(path, "must be at most " + number(kMaxDurationS) + " seconds (7 days), got " + number(value) + ".",
             zero_ok ? "Use 0 to turn it off." : "");
    }
  }

  // exec and the environment take C strings: a NUL would silently cut the value, so it is refused.
  bool no_nul(const std::string& path, const std::string& value) {
    if (value.find('\0') == std::string::npos) return true;
    report(path, "contains a NUL byte (\\0), which no argument, variable or path can hold.",
           "Remove the \\0 from the value.");
    return false;
  }

  void no_nul(const std::string& path, const std::vector<std::string>& values) {
    for (std::size_t i = 0; i < values.size(); ++i) no_nul(path + "[" + std::to_string(i) + "]", values[i]);
  }

  void check_name() {
    if (spec_.name.empty()) {
      report("name", "is empty.", "Example: name: tiny-gpt");
    } else if (!valid_job_name(spec_.name)) {
      const std::string like = job_name_like(spec_.name).substr(0, kMaxNameLength);
      report("name", "'" + spec_.name + "' is not a valid job name: use lowercase letters, digits and '-'.",
             like.empty() ? "Example: name: tiny-gpt" : "Did you mean '" + like + "'?");
    } else if (spec_.name.size() > kMaxNameLength) {
      report("name", "is " + std::to_string(spec_.name.size()) + " characters long; a job name has at most " +
                         std::to_string(kMaxNameLength) + " (it names the job's log directory).",
             "Shorten it, e.g. '" + spec_.name.substr(0, 32) + "'.");
    }
  }

  void check_nodes() {
    const auto& nodes = spec_.nodes;
    const bool is_static = nodes.provider == Provider::static_list;
    const bool is_ssh = nodes.provider == Provider::ssh;
    const bool is_slurm = nodes.provider == Provider::slurm;
    if (is_slurm && nodes.min_count == 0 && nodes.max_count == 0) {
      // No count: every node of the allocation.
    } else if (nodes.min_count < 1) {
      report("nodes.count", "must be at least 1, got " + std::to_string(nodes.min_count) + ".");
    } else if (nodes.max_count > kMaxNodes || nodes.min_count > kMaxNodes) {
      report("nodes.count", "must be at most " + std::to_string(kMaxNodes) + " nodes, got " +
                                std::to_string(std::max(nodes.min_count, nodes.max_count)) + ".");
    } else if (nodes.min_count > nodes.max_count) {
      report("nodes.count", "minimum " + std::to_string(nodes.min_count) + " is greater than maximum " +
                                std::to_string(nodes.max_count) + ".",
             "Write MIN:MAX with MIN <= MAX, e.g. " + std::to_string(nodes.max_count) + ":" +
                 std::to_string(nodes.min_count) + ".");
    } else if (nodes.min_count != nodes.max_count && nodes.provider == Provider::local) {
      report("nodes.count", "a range (MIN:MAX) needs provider static, join, ssh or slurm; provider " +
                                std::string(to_string(nodes.provider)) + " has a fixed number of nodes.",
             "Write count: N.");
    }
    if (is_static && nodes.agents.empty()) {
      report("nodes.agents", "provider static needs the address of every node's agent.",
             "Example: agents: [10.0.0.1:29400, 10.0.0.2:29400]");
    } else if (!is_static && !nodes.agents.empty()) {
      report("nodes.agents", "is only for provider static (provider is " +
                                 std::string(to_string(nodes.provider)) + ").",
             "Remove agents, or set provider: static.");
    } else if (is_static && !where_.is_broken("nodes.count") &&
               static_cast<int>(nodes.agents.size()) != nodes.max_count) {
      report("nodes.agents", std::to_string(nodes.agents.size()) + " agents are listed but nodes.count is " +
                                 (nodes.min_count == nodes.max_count ? std::to_string(nodes.min_count)
                                                                     : "at most " + std::to_string(nodes.max_count)) +
                                 ".",
             "List one agent per node, or leave out count (it defaults to the number of agents).");
    }
    check_hosts();
    const bool is_join = nodes.provider == Provider::join;
    const bool dials_in = is_join || is_ssh || is_slurm;
    if (is_join && nodes.rendezvous.empty()) {
      report("nodes.rendezvous", "provider join needs the host:port the launcher listens on for agents.",
             "Example: rendezvous: 10.0.0.1:29500 (agents run `dtrain agent --join 10.0.0.1:29500`)");
    } else if (!dials_in && !nodes.rendezvous.empty()) {
      report("nodes.rendezvous", "is only for providers join, ssh and slurm (provider is " +
                                     std::string(to_string(nodes.provider)) + ").",
             "Remove rendezvous, or set provider: join.");
    } else if (!nodes.rendezvous.empty()) {
      // Port 0: any free port (agents the launcher starts are told which).
      if (const std::string problem = address_problem(nodes.rendezvous, !is_join); !problem.empty()) {
        report("nodes.rendezvous", "'" + nodes.rendezvous + "' " + problem + ".", "Write host:port, e.g. 10.0.0.1:29500.");
      }
    }
    std::set<std::string> seen;
    for (std::size_t i = 0; i < nodes.agents.size(); ++i) {
      const std::string path = "nodes.agents[" + std::to_string(i) + "]";
      const std::string& agent = nodes.agents[i];
      if (const std::string problem = address_problem(agent); !problem.empty()) {
        report(path, "'" + agent + "' " + problem + ".", "Write host:port, e.g. node1:29400 or [fe80::1]:29400.");
      } else if (!seen.insert(agent).second) {
        report(path, "'" + agent + "' is listed twice.", "List each node's agent once.");
      }
    }
    if (no_nul("nodes.interface", nodes.interface) && nodes.interface.find_first_of(" \t\n=") != std::string::npos) {
      report("nodes.interface", "'" + nodes.interface + "' is not an interface name.", "Example: interface: eth0");
    }
    duration("nodes.join_timeout_s", nodes.join_timeout_s, false);
  }

  // provider ssh: one "[user@]host[:port]" per node; the ssh and srun commands are argv lists.
  void check_hosts() {
    const auto& nodes = spec_.nodes;
    const bool is_ssh = nodes.provider == Provider::ssh;
    if (is_ssh && nodes.hosts.empty()) {
      report("nodes.hosts", "provider ssh needs the hosts to start agents on.",
             "Example: hosts: [node1, node2] (the launcher runs `ssh node1 dtrain agent --join ...`)");
    } else if (!is_ssh && !nodes.hosts.empty()) {
      report("nodes.hosts", "is only for provider ssh (provider is " + std::string(to_string(nodes.provider)) + ").",
             nodes.provider == Provider::static_list ? "Static agents are listed in nodes.agents as host:port."
                                                     : "Remove hosts, or set provider: ssh.");
    } else if (is_ssh && !where_.is_broken("nodes.count") && static_cast<int>(nodes.hosts.size()) != nodes.max_count) {
      report("nodes.hosts", std::to_string(nodes.hosts.size()) + " hosts are listed but nodes.count is " +
                                (nodes.min_count == nodes.max_count ? std::to_string(nodes.min_count)
                                                                    : "at most " + std::to_string(nodes.max_count)) +
                                ".",
             "List one host per node, or leave out count (it defaults to the number of hosts).");
    }
    std::set<std::string> seen;
    for (std::size_t i = 0; i < nodes.hosts.size(); ++i) {
      const std::string path = "nodes.hosts[" + std::to_string(i) + "]";
      const std::string& host = nodes.hosts[i];
      if (const std::string problem = ssh_host_problem(host); !problem.empty()) {
        report(path, "'" + host + "' " + problem + ".", "Write host, user@host or host:ssh_port, e.g. alice@node2:2222.");
      } else if (!seen.insert(host).second) {
        report(path, "'" + host + "' is listed twice.", "List each host once; run more workers with workers_per_node.");
      }
    }
    no_nul("nodes.ssh_command", nodes.ssh_command);
    no_nul("nodes.srun_command", nodes.srun_command);
    no_nul("nodes.remote_dtrain", nodes.remote_dtrain);
    if (is_ssh && (nodes.ssh_command.empty() || nodes.ssh_command[0].empty())) {
      report("nodes.ssh_command", "is empty.", "Example: ssh_command: [ssh, -o, BatchMode=yes]");
    }
    if (nodes.provider == Provider::slurm && (nodes.srun_command.empty() || nodes.srun_command[0].empty())) {
      report("nodes.srun_command", "is empty.", "Example: srun_command: [srun]");
    }
    if (!nodes.remote_dtrain.empty() && !is_ssh && nodes.provider != Provider::slurm) {
      report("nodes.remote_dtrain", "is only for providers ssh and slurm (provider is " +
                                        std::string(to_string(nodes.provider)) + ").",
             "Remove remote_dtrain.");
    }
  }

  void check_workers_and_command() {
    const auto& wpn = spec_.workers_per_node;
    if (wpn.kind == Spec::WorkersPerNode::Kind::count && wpn.count < 1) {
      report("workers_per_node", "must be at least 1, got " + std::to_string(wpn.count) + ".",
             "Use an integer >= 1, gpu (one per GPU) or cpu (one per CPU).");
    } else if (wpn.kind == Spec::WorkersPerNode::Kind::count && wpn.count > kMaxWorkersPerNode) {
      report("workers_per_node", "must be at most " + std::to_string(kMaxWorkersPerNode) + ", got " +
                                     std::to_string(wpn.count) + ".");
    } else if (wpn.kind == Spec::WorkersPerNode::Kind::count && !where_.is_broken("nodes.count") &&
               spec_.nodes.max_count >= 1 && spec_.nodes.max_count <= kMaxNodes &&
               static_cast<long long>(spec_.nodes.max_count) * wpn.count > kMaxWorldSize) {
      report("workers_per_node", std::to_string(wpn.count) + " workers on each of " +
                                     std::to_string(spec_.nodes.max_count) + " nodes make " +
                                     std::to_string(static_cast<long long>(spec_.nodes.max_count) * wpn.count) +
                                     " ranks; a job has at most " + std::to_string(kMaxWorldSize) + ".",
             "Lower workers_per_node or nodes.count.");
    }
    const auto& command = spec_.command;
    if (spec_.shell && command.size() == 1) no_nul("command", command[0]);
    else no_nul("command", command);
    if (command.empty()) {
      report("command", "is empty.", "Example: command: [python3, train.py]");
    } else if (spec_.shell && command.size() > 1) {
      std::string joined;
      for (const auto& word : command) joined += (joined.empty() ? "" : " ") + word;
      report("command", "with shell: true, command must be one string, got a list of " +
                            std::to_string(command.size()) + ".",
             "Write it as one string: command: \"" + joined + "\"");
    } else if (command[0].empty()) {
      report(command.size() == 1 && spec_.shell ? "command" : "command[0]", "the program to run is empty.",
             "Example: command: [python3, train.py]");
    }
  }

  void check_env(const std::string& section, const std::map<std::string, std::string>& env) {
    for (const auto& [name, value] : env) {
      const std::string path = section + "." + name;
      if (!valid_env_name(name)) {
        report(path, "'" + name + "' is not an environment variable name.",
               "Use letters, digits and '_', not starting with a digit.");
      } else if (is_reserved_env(name)) {
        report(path, name + " is set by dtrain for every worker and cannot be overridden.",
               "Remove it; ranks, sizes and addresses follow from nodes and workers_per_node.");
      } else {
        no_nul(path, value);
      }
    }
  }

  void check_console() {
    const auto& logs = spec_.logs;
    if (logs.console != Spec::Logs::Console::ranks) return;
    if (logs.console_ranks.empty() && !where_.is_broken("logs.console")) {
      report("logs.console", "lists no rank.", "Use console: none to show no rank.");
    }
    // The world size is known here only for a fixed node count and an integer workers_per_node; otherwise
    // make_plan warns about ranks that do not exist.
    const auto& wpn = spec_.workers_per_node;
    const bool world_known = wpn.kind == Spec::WorkersPerNode::Kind::count && wpn.count >= 1 &&
                             !where_.is_broken("workers_per_node") && !where_.is_broken("nodes.count") &&
                             spec_.nodes.min_count >= 1 && spec_.nodes.min_count == spec_.nodes.max_count;
    const long long world = static_cast<long long>(spec_.nodes.min_count) * wpn.count;
    for (std::size_t i = 0; i < logs.console_ranks.size(); ++i) {
      const int rank = logs.console_ranks[i];
      const std::string path = "logs.console[" + std::to_string(i) + "]";
      if (rank < 0) {
        report(path, "ranks are >= 0, got " + std::to_string(rank) + ".");
      } else if (world_known && rank >= world) {
        report(path, "rank " + std::to_string(rank) + " does not exist: the job has " +
                         (world == 1 ? std::string("1 rank (0)") : std::to_string(world) + " ranks (0-" +
                                                                        std::to_string(world - 1) + ")") + ".");
      }
    }
  }

  const Spec& spec_;
  const Locations& where_;
  std::vector<Diagnostic>& out_;
};

}  // namespace

void check_spec(const Spec& spec, const Locations& where, std::vector<Diagnostic>& out) {
  Checker(spec, where, out).run();
}

}  // namespace detail

std::optional<SshHost> parse_ssh_host(std::string_view text) {
  if (!detail::ssh_host_problem(text).empty()) return std::nullopt;
  SshHost out;
  if (const auto at = text.find('@'); at != std::string_view::npos) {
    out.user = std::string(text.substr(0, at));
    text = text.substr(at + 1);
  }
  const auto colon = text.find(':');
  out.host = std::string(text.substr(0, colon));
  if (colon != std::string_view::npos) out.port = std::stoi(std::string(text.substr(colon + 1)));
  return out;
}

std::chrono::milliseconds duration_ms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxDurationS) {
    throw std::out_of_range("duration of " + detail::number(seconds) + " s is outside 0-" +
                            detail::number(kMaxDurationS) + " s (an unvalidated spec)");
  }
  // At most 6.048e8 ms here, exact in a double and in every integer type it goes into.
  const long long ms = std::llround(seconds * 1000.0);
  return std::chrono::milliseconds(ms == 0 && seconds > 0 ? 1 : ms);
}

void validate(const Spec& spec) {
  std::vector<Diagnostic> out;
  detail::check_spec(spec, detail::Locations(spec.source), out);
  detail::throw_if_any(std::move(out));
}

}  // namespace dtrain::spec

#include "cli/spec/reader.h"

#include <set>
#include <sstream>
#include <utility>

#include "cli/spec/schema.h"
#include "cli/spec/value_reader.h"

namespace dtrain::spec::detail {
namespace {

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The sections of a spec, each read with ValueReader's typed readers.
class Reader : ValueReader {
 public:
  using ValueReader::ValueReader;

  Spec read(const YAML::Node& root) {
    Spec spec;
    where_.set_value("", position_of(root.Mark()));
    if (!root.IsNull() && !root.IsMap()) {
      error("", "the spec must be a mapping of keys, got " + describe(root) + ".",
            "Start with e.g. 'name: tiny-gpt' and 'command: [python3, train.py]'.");
      return spec;
    }
    bool command_is_string = false;
    std::set<std::string> seen;
    each_entry(root, "", [&](const std::string& key, const std::string& path, const YAML::Node& value) {
      seen.insert(key);
      if (key == "name") read_string(value, path, spec.name);
      else if (key == "nodes") read_nodes(value, path, spec.nodes);
      else if (key == "workers_per_node") read_workers_per_node(value, path, spec.workers_per_node);
      else if (key == "command") command_is_string = read_command(value, path, spec.command);
      else if (key == "shell") read_bool(value, path, spec.shell);
      else if (key == "env") read_string_map(value, path, spec.env);
      else if (key == "working_dir") read_string(value, path, spec.working_dir);
      else if (key == "restart") read_restart(value, path, spec.restart);
      else if (key == "stop") read_stop(value, path, spec.stop);
      else if (key == "health") read_health(value, path, spec.health);
      else if (key == "logs") read_logs(value, path, spec.logs);
      else if (key == "nccl") read_nccl(value, path, spec.nccl);
      else if (key == "binding") read_choice(value, path, Choices<Binding>{{"auto", Binding::automatic},
                                                                          {"none", Binding::none}}, spec.binding);
      else if (key == "gpu_isolation") read_bool(value, path, spec.gpu_isolation);
      else if (key == "observe") read_observe(value, path, spec.observe);
    });
    // A misspelt required key already has its did-you-mean; "missing" (or "is empty") would only repeat it.
    for (const auto& [key, example] : {std::pair{"name", "name: tiny-gpt"},
                                       std::pair{"command", "command: [python3, train.py]"}}) {
      if (seen.count(key)) continue;
      if (suggested(key)) where_.mark_broken(key);
      else error(key, "missing required key.", std::string("Example: ") + example);
    }
    if (command_is_string && !spec.shell && !where_.is_broken("shell") && !spec.command.empty()) {
      const auto words = split_words(spec.command[0]);
      std::string list;
      for (const auto& w : words) list += (list.empty() ? "" : ", ") + w;
      error("command", "a single string needs shell: true.",
            "Write it as a list, command: [" + list + "], or add 'shell: true' to run it with /bin/sh -c.");
    }
    return spec;
  }

 private:
  void read_nodes(const YAML::Node& node, const std::string& path, Spec::Nodes& nodes) {
    if (!section(node, path)) return;
    bool count_given = false;
    each_entry(node, path, [&](const std::string& key, const std::string& key_path, const YAML::Node& value) {
      if (key == "provider") {
        read_choice(value, key_path, Choices<Provider>{{"local", Provider::local}, {"static", Provider::static_list},
                                                      {"ssh", Provider::ssh}, {"slurm", Provider::slurm},
                                                      {"join", Provider::join}},
                    nodes.provider);
      } else if (key == "count") {
        count_given = true;
        read_count(value, key_path, nodes);
      } else if (key == "agents") {
        read_string_list(value, key_path, nodes.agents, "Example: agents: [10.0.0.1:29400, 10.0.0.2:29400]");
      } else if (key == "hosts") {
        read_string_list(value, key_path, nodes.hosts, "Example: hosts: [node1, alice@node2, node3:2222]");
      } else if (key == "ssh_command") {
        nodes.ssh_command.clear();
        read_string_list(value, key_path, nodes.ssh_command, "Example: ssh_command: [ssh, -i, ~/.ssh/cluster]");
      } else if (key == "srun_command") {
        nodes.srun_command.clear();
        read_string_list(value, key_path, nodes.srun_command, "Example: srun_command: [srun, --partition, gpu]");
      } else if (key == "remote_dtrain") {
        read_string(value, key_path, nodes.remote_dtrain);
      } else if (key == "rendezvous") {
        read_string(value, key_path, nodes.rendezvous);
      } else if (key == "interface") {
        read_string(value, key_path, nodes.interface);
      } else if (key == "join_timeout_s") {
        read_number(value, key_path, nodes.join_timeout_s);
      } else if (key == "topology") {
        read_string(value, key_path, nodes.topology);
      }
    });
    // A static job's size is its list of agents unless count says otherwise.
    if (!count_given && nodes.provider == Provider::static_list && !nodes.agents.empty()) {
      nodes.min_count = nodes.max_count = static_cast<int>(nodes.agents.size());
    }
    if (!count_given && nodes.provider == Provider::ssh && !nodes.hosts.empty()) {
      nodes.min_count = nodes.max_count = static_cast<int>(nodes.hosts.size());
    }
    // Every node of the allocation, known only when the job starts inside it.
    if (!count_given && nodes.provider == Provider::slurm) nodes.min_count = nodes.max_count = 0;
  }

  void read_count(const YAML::Node& node, const std::string& path, Spec::Nodes& nodes) {
    const std::string expected = "an integer or MIN:MAX";
    if (!scalar(node, path, expected)) return;
    const std::string& text = node.Scalar();
    const auto colon = text.find(':');
    if (colon == std::string::npos) {
      if (const auto n = parse_int(text)) {
        nodes.min_count = nodes.max_count = *n;
        return;
      }
    } else {
      const auto lo = parse_int(std::string_view(text).substr(0, colon));
      const auto hi = parse_int(std::string_view(text).substr(colon + 1));
      if (lo && hi) {
        nodes.min_count = *lo;
        nodes.max_count = *hi;
        return;
      }
    }
    error(path, "expected " + expected + ", got " + describe(node) + ".", "Examples: count: 2, count: 2:4");
  }

  void read_workers_per_node(const YAML::Node& node, const std::string& path, Spec::WorkersPerNode& out) {
    const std::string expected = "an integer >= 1, gpu or cpu";
    if (!scalar(node, path, expected)) return;
    const std::string& text = node.Scalar();
    if (text == "gpu") {
      out.kind = Spec::WorkersPerNode::Kind::gpu;
    } else if (text == "cpu") {
      out.kind = Spec::WorkersPerNode::Kind::cpu;
    } else if (const auto n = parse_int(text)) {
      out.kind = Spec::WorkersPerNode::Kind::count;
      out.count = *n;
    } else {
      const std::string near = closest(text, {"gpu", "cpu"});
      error(path, "expected " + expected + ", got " + describe(node) + ".",
            near.empty() ? "" : "Did you mean '" + near + "'?");
    }
  }

  // Returns whether the command was written as one string.
  bool read_command(const YAML::Node& node, const std::string& path, std::vector<std::string>& out) {
    const std::string example = "Example: command: [python3, train.py]";
    if (node.IsScalar()) {
      out = {node.Scalar()};
      return true;
    }
    if (!node.IsSequence()) {
      error(path, "expected a list of arguments, got " + describe(node) + ".", example);
      return false;
    }
    read_string_list(node, path, out, example);
    return false;
  }

  void read_restart(const YAML::Node& node, const std::string& path, Spec::Restart& out) {
    if (!section(node, path)) return;
    each_entry(node, path, [&](const std::string& key, const std::string& key_path, const YAML::Node& value) {
      if (key == "max_restarts") read_int(value, key_path, out.max_restarts);
      else if (key == "backoff_s") read_number(value, key_path, out.backoff_s);
    });
  }

  void read_stop(const YAML::Node& node, const std::string& path, Spec::Stop& out) {
    if (!section(node, path)) return;
    each_entry(node, path, [&](const std::string&, const std::string& key_path, const YAML::Node& value) {
      read_number(value, key_path, out.grace_s);
    });
  }

  void read_health(const YAML::Node& node, const std::string& path, Spec::Health& out) {
    if (!section(node, path)) return;
    each_entry(node, path, [&](const std::string& key, const std::string& key_path, const YAML::Node& value) {
      if (key == "heartbeat_timeout_s") read_number(value, key_path, out.heartbeat_timeout_s);
      else if (key == "hang_timeout_s") read_number(value, key_path, out.hang_timeout_s);
      else if (key == "startup_timeout_s") read_number(value, key_path, out.startup_timeout_s);
      else if (key == "exit_timeout_s") read_number(value, key_path, out.exit_timeout_s);
      else if (key == "node_timeout_s") read_number(value, key_path, out.node_timeout_s);
      else if (key == "straggler_ratio") read_number(value, key_path, out.straggler_ratio, "a number above 1");
      else if (key == "instrument") {
        using Instrument = Spec::Health::Instrument;
        read_choice(value, key_path, Choices<Instrument>{{"auto", Instrument::automatic}, {"off", Instrument::off}},
                    out.instrument);
      }
    });
  }

  void read_logs(const YAML::Node& node, const std::string& path, Spec::Logs& out) {
    if (!section(node, path)) return;
    each_entry(node, path, [&](const std::string& key, const std::string& key_path, const YAML::Node& value) {
      if (key == "dir") read_string(value, key_path, out.dir);
      else if (key == "console") read_console(value, key_path, out);
    });
  }

  void read_console(const YAML::Node& node, const std::string& path, Spec::Logs& out) {
    const std::string expected = "rank0, all, none or a list of ranks";
    if (node.IsSequence()) {
      out.console = Spec::Logs::Console::ranks;
      for (std::size_t i = 0; i < node.size(); ++i) {
        const std::string item_path = path + "[" + std::to_string(i) + "]";
        where_.set_value(item_path, position_of(node[i].Mark()));
        int rank = 0;
        if (read_int(node[i], item_path, rank)) out.console_ranks.push_back(rank);
      }
      return;
    }
    if (!scalar(node, path, expected)) return;
    const std::string& text = node.Scalar();
    if (text == "rank0") out.console = Spec::Logs::Console::rank0;
    else if (text == "all") out.console = Spec::Logs::Console::all;
    else if (text == "none") out.console = Spec::Logs::Console::none;
    else if (const auto rank = parse_int(text.starts_with("rank") ? text.substr(4) : text)) {
      error(path, "expected " + expected + ", got " + describe(node) + ".",
            "To show rank " + std::to_string(*rank) + " only, write console: [" + std::to_string(*rank) + "].");
    } else {
      const std::string near = closest(text, {"rank0", "all", "none"});
      error(path, "expected " + expected + ", got " + describe(node) + ".",
            near.empty() ? "Example: console: [0, 4]" : "Did you mean '" + near + "'?");
    }
  }

  void read_observe(const YAML::Node& node, const std::string& path, Spec::Observe& out) {
    if (!section(node, path)) return;
    each_entry(node, path, [&](const std::string&, const std::string& key_path, const YAML::Node& value) {
      read_string(value, key_path, out.metrics_addr);
    });
  }

  void read_nccl(const YAML::Node& node, const std::string& path, Spec::Nccl& out) {
    if (!section(node, path)) return;
    each_entry(node, path, [&](const std::string& key, const std::string& key_path, const YAML::Node& value) {
      if (key == "auto") read_bool(value, key_path, out.automatic);
      else if (key == "env") read_string_map(value, key_path, out.env);
    });
  }
};

}  // namespace

Position position_of(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0 || mark.column < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

Spec read_spec(const YAML::Node& root, Locations& where, std::vector<Diagnostic>& out) {
  return Reader(where, out).read(root);
}

}  // namespace dtrain::spec::detail

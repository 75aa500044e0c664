// The rules for the nodes section: how many nodes, and the keys each provider needs or refuses.

#include <algorithm>
#include <set>

#include "cli/spec/checks.h"
#include "cli/spec/host_syntax.h"

namespace dtrain::spec::detail {
namespace {

// "is only for provider ssh (provider is local)."
std::string only_for(std::string_view providers, Provider provider) {
  return "is only for " + std::string(providers) + " (provider is " + std::string(to_string(provider)) + ").";
}

void check_count(const Spec::Nodes& nodes, Reporter& r) {
  if (nodes.provider == Provider::slurm && nodes.min_count == 0 && nodes.max_count == 0) {
    // No count: every node of the allocation.
  } else if (nodes.min_count < 1) {
    r.report("nodes.count", "must be at least 1, got " + std::to_string(nodes.min_count) + ".");
  } else if (nodes.max_count > kMaxNodes || nodes.min_count > kMaxNodes) {
    r.report("nodes.count", "must be at most " + std::to_string(kMaxNodes) + " nodes, got " +
                                std::to_string(std::max(nodes.min_count, nodes.max_count)) + ".");
  } else if (nodes.min_count > nodes.max_count) {
    r.report("nodes.count",
             "minimum " + std::to_string(nodes.min_count) + " is greater than maximum " +
                 std::to_string(nodes.max_count) + ".",
             "Write MIN:MAX with MIN <= MAX, e.g. " + std::to_string(nodes.max_count) + ":" +
                 std::to_string(nodes.min_count) + ".");
  } else if (nodes.min_count != nodes.max_count && nodes.provider == Provider::local) {
    r.report("nodes.count",
             "a range (MIN:MAX) needs provider static, join, ssh or slurm; provider " +
                 std::string(to_string(nodes.provider)) + " has a fixed number of nodes.",
             "Write count: N.");
  }
}

// Providers static and ssh size the job by their list (of `noun`s, one per node); a nodes.count that disagrees
// with the list is reported at the list, unless the count is itself broken.
void check_list_matches_count(const Spec::Nodes& nodes, const std::string& path, std::size_t listed,
                              const std::string& noun, Reporter& r) {
  if (r.is_broken("nodes.count") || static_cast<int>(listed) == nodes.max_count) return;
  r.report(path,
           std::to_string(listed) + " " + noun + "s are listed but nodes.count is " +
               (nodes.min_count == nodes.max_count ? std::to_string(nodes.min_count)
                                                   : "at most " + std::to_string(nodes.max_count)) +
               ".",
           "List one " + noun + " per node, or leave out count (it defaults to the number of " + noun + "s).");
}

// A node list that belongs to one provider (nodes.agents: static, nodes.hosts: ssh).
struct OwnedList {
  std::string path;                           // "nodes.agents"
  const std::vector<std::string>& entries;
  Provider owner;
  std::string noun;                           // what an entry is, for the count message: "agent"
  std::string needed;                         // the error when the owner has no list
  std::string example;                        // its fix
  std::string remove;                         // the fix when another provider has a list
};

// The owner needs the list, with one entry per node; any other provider refuses it.
void check_owned_list(const Spec::Nodes& nodes, const OwnedList& list, Reporter& r) {
  const bool owned = nodes.provider == list.owner;
  if (owned && list.entries.empty()) {
    r.report(list.path, list.needed, list.example);
  } else if (!owned && !list.entries.empty()) {
    r.report(list.path, only_for("provider " + std::string(to_string(list.owner)), nodes.provider), list.remove);
  } else if (owned) {
    check_list_matches_count(nodes, list.path, list.entries.size(), list.noun, r);
  }
}

// provider static: the address of every node's agent.
void check_agents_listed(const Spec::Nodes& nodes, Reporter& r) {
  check_owned_list(nodes,
                   {.path = "nodes.agents", .entries = nodes.agents, .owner = Provider::static_list, .noun = "agent",
                    .needed = "provider static needs the address of every node's agent.",
                    .example = "Example: agents: [10.0.0.1:29400, 10.0.0.2:29400]",
                    .remove = "Remove agents, or set provider: static."},
                   r);
}

// Each entry of a node list (nodes.agents, nodes.hosts): well formed by `syntax`, and listed once.
void check_entries(const std::string& list, const std::vector<std::string>& entries, Status (*syntax)(std::string_view),
                   const std::string& syntax_hint, const std::string& twice_hint, Reporter& r) {
  std::set<std::string> seen;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string path = list + "[" + std::to_string(i) + "]";
    const std::string& entry = entries[i];
    if (const Status status = syntax(entry); !status.ok()) {
      r.report(path, "'" + entry + "' " + status.message() + ".", syntax_hint);
    } else if (!seen.insert(entry).second) {
      r.report(path, "'" + entry + "' is listed twice.", twice_hint);
    }
  }
}

// provider ssh: one "[user@]host[:port]" per node.
void check_hosts(const Spec::Nodes& nodes, Reporter& r) {
  check_owned_list(nodes,
                   {.path = "nodes.hosts", .entries = nodes.hosts, .owner = Provider::ssh, .noun = "host",
                    .needed = "provider ssh needs the hosts to start agents on.",
                    .example = "Example: hosts: [node1, node2] (the launcher runs `ssh node1 dtrain agent --join ...`)",
                    .remove = nodes.provider == Provider::static_list
                                  ? "Static agents are listed in nodes.agents as host:port."
                                  : "Remove hosts, or set provider: ssh."},
                   r);
  check_entries("nodes.hosts", nodes.hosts, check_ssh_host,
                "Write host, user@host or host:ssh_port, e.g. alice@node2:2222.",
                "List each host once; run more workers with workers_per_node.", r);
}

// providers ssh and slurm start the agents: the ssh and srun commands are argv lists.
void check_remote_start(const Spec::Nodes& nodes, Reporter& r) {
  const bool is_ssh = nodes.provider == Provider::ssh;
  r.no_nul("nodes.ssh_command", nodes.ssh_command);
  r.no_nul("nodes.srun_command", nodes.srun_command);
  r.no_nul("nodes.remote_dtrain", nodes.remote_dtrain);
  if (is_ssh && (nodes.ssh_command.empty() || nodes.ssh_command[0].empty())) {
    r.report("nodes.ssh_command", "is empty.", "Example: ssh_command: [ssh, -o, BatchMode=yes]");
  }
  if (nodes.provider == Provider::slurm && (nodes.srun_command.empty() || nodes.srun_command[0].empty())) {
    r.report("nodes.srun_command", "is empty.", "Example: srun_command: [srun]");
  }
  if (!nodes.remote_dtrain.empty() && !is_ssh && nodes.provider != Provider::slurm) {
    r.report("nodes.remote_dtrain", only_for("providers ssh and slurm", nodes.provider), "Remove remote_dtrain.");
  }
}

void check_rendezvous(const Spec::Nodes& nodes, Reporter& r) {
  const bool is_join = nodes.provider == Provider::join;
  const bool dials_in = is_join || nodes.provider == Provider::ssh || nodes.provider == Provider::slurm;
  if (is_join && nodes.rendezvous.empty()) {
    r.report("nodes.rendezvous", "provider join needs the host:port the launcher listens on for agents.",
             "Example: rendezvous: 10.0.0.1:29500 (agents run `dtrain agent --join 10.0.0.1:29500`)");
  } else if (!dials_in && !nodes.rendezvous.empty()) {
    r.report("nodes.rendezvous", only_for("providers join, ssh and slurm", nodes.provider),
             "Remove rendezvous, or set provider: join.");
  } else if (!nodes.rendezvous.empty()) {
    // Port 0: any free port (agents the launcher starts are told which).
    if (const Status syntax = check_address(nodes.rendezvous, !is_join); !syntax.ok()) {
      r.report("nodes.rendezvous", "'" + nodes.rendezvous + "' " + syntax.message() + ".",
               "Write host:port, e.g. 10.0.0.1:29500.");
    }
  }
}

// provider local: a saved topology the agents read instead of scanning the host; read here, so a bad file is an
// error before anything starts.
void check_topology(const Spec::Nodes& nodes, Reporter& r) {
  if (nodes.topology.empty() || !r.no_nul("nodes.topology", nodes.topology)) return;
  if (nodes.provider != Provider::local) {
    r.report("nodes.topology", only_for("provider local", nodes.provider),
             "Start each agent with `dtrain agent --topology FILE` instead.");
    return;
  }
  if (Result<node::topo::NodeTopology> loaded = node::topo::load_topology_file(nodes.topology); !loaded.ok()) {
    r.report("nodes.topology", loaded.status.message() + ".",
             "Give the path of a saved `nvidia-smi topo -m` output, relative to where dtrain starts.");
  }
}

}  // namespace

void check_nodes(const Spec& spec, Reporter& r) {
  const auto& nodes = spec.nodes;
  check_count(nodes, r);
  check_agents_listed(nodes, r);
  check_hosts(nodes, r);
  check_remote_start(nodes, r);
  check_rendezvous(nodes, r);
  check_topology(nodes, r);
  check_entries(
      "nodes.agents", nodes.agents, [](std::string_view agent) { return check_address(agent); },
      "Write host:port, e.g. node1:29400 or [fe80::1]:29400.", "List each node's agent once.", r);
  if (r.no_nul("nodes.interface", nodes.interface) && nodes.interface.find_first_of(" \t\n=") != std::string::npos) {
    r.report("nodes.interface", "'" + nodes.interface + "' is not an interface name.", "Example: interface: eth0");
  }
  r.duration_from("nodes.join_timeout_s", nodes.join_timeout_s, kMinJoinTimeoutS,
                  "an agent's connection attempt takes up to a second and a turned-away agent redials a second "
                  "later, so a shorter wait fails every job that has agents join");
}

}  // namespace dtrain::spec::detail

#include "cli/controller/providers/remote_agents.h"

#include <cstdlib>
#include <stdexcept>

#include "agent/node/facts.h"
#include "common/address.h"
#include "common/io/text_out.h"

namespace dtrain::controller {
namespace {

// The agent's own arguments, the same under ssh and srun.
std::vector<std::string> agent_words(const RemoteAgentOptions& options, const std::string& slot) {
  std::vector<std::string> words = {options.dtrain, "agent", "--join", options.join_address, "--slot", slot,
                                    "--listen", "0.0.0.0:0", "--join-timeout-s",
                                    std::to_string(static_cast<long long>(options.join_timeout_s + 0.999)),
                                    "--quiet"};
  if (options.insecure) words.push_back("--insecure");
  if (!options.secret_dir.empty()) {
    words.push_back("--secret-dir");
    words.push_back(options.secret_dir);
  }
  if (!options.run_dir.empty()) {
    words.push_back("--run-dir");
    words.push_back(options.run_dir);
  }
  return words;
}

}  // namespace

std::vector<std::vector<std::string>> ssh_agent_commands(const spec::Spec& spec, const RemoteAgentOptions& options) {
  std::vector<std::vector<std::string>> commands;
  for (std::size_t i = 0; i < spec.nodes.hosts.size(); ++i) {
    const auto host = spec::parse_ssh_host(spec.nodes.hosts[i]);
    if (!host) throw std::runtime_error("nodes.hosts[" + std::to_string(i) + "] '" + spec.nodes.hosts[i] + "' is not [user@]host[:port]");
    std::vector<std::string> argv = spec.nodes.ssh_command;
    if (host->port != 0) {
      argv.push_back("-p");
      argv.push_back(std::to_string(host->port));
    }
    if (!host->user.empty()) {
      argv.push_back("-l");
      argv.push_back(host->user);
    }
    argv.push_back("--");
    argv.push_back(host->host);
    std::string remote;
    for (const auto& word : agent_words(options, std::to_string(i))) remote += (remote.empty() ? "" : " ") + shell_quote(word);
    argv.push_back("exec " + remote);
    commands.push_back(std::move(argv));
  }
  return commands;
}

std::vector<std::string> srun_agent_command(const spec::Spec& spec, int node_count, const RemoteAgentOptions& options) {
  std::vector<std::string> argv = spec.nodes.srun_command;
  const std::string n = std::to_string(node_count);
  for (const char* word : {"--nodes", n.c_str(), "--ntasks", n.c_str(), "--ntasks-per-node", "1", "--kill-on-bad-exit=0"}) {
    argv.emplace_back(word);
  }
  // A step's task gets one CPU unless it asks: the agent and its workers need the whole node.
  if (const char* cpus = std::getenv("SLURM_CPUS_ON_NODE"); cpus != nullptr && *cpus != '\0') {
    argv.push_back("--cpus-per-task");
    argv.emplace_back(cpus);
  }
  for (auto& word : agent_words(options, "slurm")) argv.push_back(std::move(word));
  return argv;
}

int slurm_node_count(const spec::Spec& spec) {
  if (spec.nodes.max_count > 0) return spec.nodes.max_count;
  for (const char* name : {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || n <= 0) continue;
    if (n > spec::kMaxNodes) {
      throw std::runtime_error(std::string(name) + "=" + value + ": a job runs on at most " +
                               std::to_string(spec::kMaxNodes) + " nodes; give nodes.count to use fewer");
    }
    return static_cast<int>(n);
  }
  throw std::runtime_error("provider slurm runs inside a Slurm allocation (salloc or sbatch), but SLURM_JOB_NUM_NODES "
                           "is not set; start dtrain launch from the allocation, or give nodes.count");
}

std::string rendezvous_listen_address(const spec::Spec& spec) {
  if (!spec.nodes.rendezvous.empty()) return spec.nodes.rendezvous;
  const node::Facts facts = node::gather_facts();
  std::string host;
  if (!spec.nodes.interface.empty()) {
    for (const auto& [name, address] : facts.interfaces) {
      if (name == spec.nodes.interface) host = address;
    }
    if (host.empty()) {
      throw std::runtime_error("nodes.interface " + spec.nodes.interface + " has no IPv4 address on this host, so "
                               "agents cannot be told where to join; set nodes.rendezvous to host:port");
    }
  } else if (spec.nodes.provider == spec::Provider::ssh && !spec.nodes.hosts.empty()) {
    const auto first = spec::parse_ssh_host(spec.nodes.hosts.front());
    host = first ? node::source_address_towards(first->host) : "";
    if (host.empty()) {
      throw std::runtime_error("no route from this host to " + spec.nodes.hosts.front() +
                               " (nodes.hosts[0]): cannot tell agents where to join; check the name resolves, or "
                               "set nodes.rendezvous to host:port");
    }
  } else {
    for (const auto& address : facts.addresses) {
      if (!is_loopback_host(address)) {
        host = address;
        break;
      }
    }
    if (host.empty()) host = "127.0.0.1";
  }
  return host + ":0";
}

}  // namespace dtrain::controller

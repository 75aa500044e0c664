// `dtrain agent --listen ADDR:PORT`: the node daemon. A launcher dials it and drives this node's workers.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "agent/agent.h"
#include "agent/node/topology/node_topology.h"
#include "agent/node/topology/topology.h"
#include "cli/commands.h"
#include "cli/run/node_console.h"

namespace dtrain::cli {
namespace {

// Sets what the agent's hello says of its node's topology: the live scan's, or `file`'s (--topology). False, having
// said why, when the file cannot be used.
bool set_node_topology(const std::string& file, agent::AgentOptions& options) {
  if (file.empty()) {
    options.topology = node::topo::summarize(node::topo::live_topology(), "live");
    return true;
  }
  Result<node::topo::NodeTopology> loaded = node::topo::load_topology_file(file);
  if (!loaded.ok()) {
    std::fprintf(stderr, "dtrain agent: --topology: %s\n", loaded.status.message().c_str());
    return false;
  }
  options.topology = std::move(loaded.value);
  return true;
}

// --slot: a node position, or `slurm` for $SLURM_NODEID. False, having said why on stderr, when it is neither.
bool parse_slot(const std::string& slot, std::optional<unsigned>& out) {
  std::string text = slot;
  if (text == "slurm") {
    const char* id = std::getenv("SLURM_NODEID");
    if (id == nullptr) {
      std::fprintf(stderr, "dtrain agent: --slot slurm, but SLURM_NODEID is not set: run it under srun\n");
      return false;
    }
    text = id;
  }
  char* end = nullptr;
  const unsigned long value = std::strtoul(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value > 1000000) {
    std::fprintf(stderr, "dtrain agent: --slot expects a node position (0, 1, ...) or slurm, got '%s'\n",
                 slot.c_str());
    return false;
  }
  out = static_cast<unsigned>(value);
  return true;
}

}  // namespace

int run_agent(agent::AgentOptions& options, bool quiet) {
  auto logger = spdlog::stderr_color_mt("dtrain-agent");
  logger->set_pattern("[dtrain-agent %l] %v");
  logger->set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  spdlog::set_default_logger(logger);
  block_termination_signals();
  agent::Agent daemon(options);
  on_termination_signal([&daemon](int signal) { daemon.terminate(signal); });
  int code = daemon.run();
  on_termination_signal(nullptr);
  return code;
}

bool set_live_topology(agent::AgentOptions& options) { return set_node_topology("", options); }

Action add_agent_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("agent", "Run the node agent that launchers drive over gRPC");
  auto options = std::make_shared<agent::AgentOptions>();
  auto quiet = std::make_shared<bool>(false);
  auto lease_s = std::make_shared<double>(10.0);
  cmd->add_option("--listen", options->listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--advertise", options->advertise_host, "address peers use to reach this node (default: the listen host)");
  cmd->add_flag("--one-shot", options->one_shot, "exit when the first launcher session ends");
  cmd->add_option("--join", options->join, "dial the launcher at HOST:PORT (its nodes.rendezvous) instead of waiting");
  auto join_timeout_s = std::make_shared<double>(60.0);
  cmd->add_option("--join-timeout-s", *join_timeout_s, "keep trying to join this long")->capture_default_str();
  cmd->add_flag("--insecure", options->insecure,
                "serve sessions in plaintext without the cluster token (anyone who reaches the port, loopback included, "
                "can run commands as this user)");
  cmd->add_option("--secret-dir", options->secret_dir, "cluster secret for TLS (default: $DTRAIN_SECRET_DIR or ~/.dtrain)");
  cmd->add_option("--run-dir", options->run_dir,
                  "where the agent keeps jobs' logs and error files: <run-dir>/<job id>/attempt_<n>/ (default: "
                  "$XDG_STATE_HOME/dtrain/runs or ~/.local/state/dtrain/runs)");
  cmd->add_option("--session-socket", options->session_socket,
                  "take sessions only over this Unix socket, from the process that started the agent (set by "
                  "launchers for provider local); the TCP port then serves the store and health reports alone");
  cmd->add_flag("--quiet", *quiet, "log warnings and errors only");
  auto topology_file = std::make_shared<std::string>();
  cmd->add_option("--topology", *topology_file, "a saved `nvidia-smi topo -m` to place ranks by, instead of a scan");
  auto slot = std::make_shared<std::string>();
  cmd->add_option("--slot", *slot,
                  "this node's position in the launcher's host list, or `slurm` for $SLURM_NODEID (set by launchers "
                  "that start agents over ssh or srun; it orders node ranks)");
  cmd->add_option("--lease-s", *lease_s, "stop the workers when the launcher is silent this long")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  // Set by `dtrain run` for the agent of its launcher's node (AgentOptions::job_command and console); not for users.
  cmd->add_flag("--job-command", options->job_command)->group("");
  auto console_ranks = std::make_shared<std::string>();
  cmd->add_option("--console-ranks", *console_ranks)->group("");
  return [options, quiet, lease_s, join_timeout_s, slot, topology_file, console_ranks]() {
    if (!console_ranks->empty()) {
      try {
        options->console = run::node_console(*console_ranks);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "dtrain agent: --console-ranks: %s\n", e.what());
        return 2;
      }
    }
    if (!slot->empty() && !parse_slot(*slot, options->slot)) return 2;
    // Bounded like a spec's durations, so the conversion to milliseconds cannot wrap (CLI11's ranges let NaN by).
    for (const auto& [flag, seconds] : {std::pair{"--join-timeout-s", *join_timeout_s}, std::pair{"--lease-s", *lease_s}}) {
      if (!(seconds >= 0 && seconds <= spec::kMaxDurationS)) {
        std::fprintf(stderr, "dtrain agent: %s must be a number of seconds up to %.0f (7 days), got %g\n", flag,
                     spec::kMaxDurationS, seconds);
        return 2;
      }
    }
    options->join_timeout = spec::duration_ms(*join_timeout_s);
    if (!set_node_topology(*topology_file, *options)) return 2;
    options->default_lease = spec::duration_ms(*lease_s);
    // `dtrain agent` ends with its agent (main's exit_now does nothing more); `dtrain run` on a node that joins a job
    // runs an agent too, and has work left after it (cli/run/multi_node.cpp), so it does not set this.
    options->exit_when_done = true;
    return run_agent(*options, *quiet);
  };
}

}  // namespace dtrain::cli

// `dtrain launch JOB.yaml [--set key=value]... [--dry-run]`: run a job described by a spec.

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "agent/node/facts.h"
#include "agent/node/topology/topology.h"
#include "cli/commands.h"
#include "cli/controller/controller.h"
#include "cli/controller/providers/remote_agents.h"
#include "cli/launching/trainer_grid.h"
#include "cli/tune/overlay.h"
#include "common/address.h"
#include "common/clock.h"

namespace dtrain::cli {

std::optional<spec::Spec> load_spec_or_report(const std::string& file, const std::vector<std::string>& sets) {
  try {
    return spec::load_spec_file(file, sets);
  } catch (const spec::SpecError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return std::nullopt;
  }
}

bool apply_tune_or_report(const std::string& file, spec::Spec& spec) {
  if (file.empty()) return true;
  try {
    const tune::Overlay overlay = tune::load_overlay_file(file);
    tune::apply_overlay(overlay, spec);
    std::string names;
    for (const auto& [name, value] : overlay.env) names += (names.empty() ? "" : ", ") + name + "=" + value;
    if (!names.empty()) std::fprintf(stderr, "dtrain: %s: every worker gets %s\n", file.c_str(), names.c_str());
    return true;
  } catch (const spec::SpecError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return false;
  }
}

int launch_job(spec::Spec spec, const LaunchFlags& flags) {
  block_termination_signals();
  controller::ControllerOptions options;
  options.self_exe = self_executable();
  options.insecure = flags.insecure;
  options.secret_dir = flags.secret_dir;
  if (flags.insecure) {
    std::fprintf(stderr, "dtrain: warning: --insecure: talking to agents in plaintext without authentication; anyone "
                         "on the network can impersonate them or run commands through them\n");
  }
  controller::Controller controller(std::move(spec), options);
  on_termination_signal([&controller](int signal) { controller.signal(signal); });
  int code = controller.run();
  on_termination_signal(nullptr);
  return code;
}

namespace {

// ssh and slurm: the commands that would start the agents (the join port is picked at launch).
void print_remote_agent_commands(const spec::Spec& spec, int count) {
  if (spec.nodes.provider != spec::Provider::ssh && spec.nodes.provider != spec::Provider::slurm) return;
  controller::RemoteAgentOptions remote;
  remote.dtrain = spec.nodes.remote_dtrain.empty() ? self_executable() : spec.nodes.remote_dtrain;
  try {
    remote.join_address = host_of(controller::rendezvous_listen_address(spec)) + ":<port at launch>";
  } catch (const std::exception& e) {
    remote.join_address = "<no rendezvous address: " + std::string(e.what()) + ">";
  }
  remote.join_timeout_s = spec.nodes.join_timeout_s;
  remote.run_dir = std::filesystem::absolute(spec.logs.dir).string();
  std::vector<std::vector<std::string>> commands;
  if (spec.nodes.provider == spec::Provider::ssh) commands = controller::ssh_agent_commands(spec, remote);
  else commands.push_back(controller::srun_agent_command(spec, count, remote));
  std::printf("\nagents are started with:\n");
  for (const auto& argv : commands) {
    std::string line;
    for (const auto& word : argv) line += (line.empty() ? "  " : " ") + word;
    std::printf("%s\n", line.c_str());
  }
}

// dtrain-trainer with --tp / --pp: the layout of its ranks (launching/trainer_grid.h). False, with the reason on
// stderr, when the trainer would refuse it.
bool print_trainer_grid(const spec::Spec& spec, const spec::Plan& plan) {
  if (spec.shell || plan.workers_per_node == 0) return true;
  const auto flags = trainer_parallel_flags(spec.command);
  if (!flags) return true;
  std::string refusal;
  const std::string grid = trainer_grid_text(*flags, static_cast<int>(plan.world_size),
                                                        static_cast<int>(plan.workers_per_node), &refusal);
  if (!refusal.empty()) {
    std::fprintf(stderr, "dtrain: dtrain-trainer would refuse this layout: %s\n", refusal.c_str());
    return false;
  }
  std::printf("\ndtrain-trainer's tensor, data and pipeline layout (--tp %d --pp %d):\n%s", flags->tp, flags->pp,
              grid.c_str());
  return true;
}

}  // namespace

int print_dry_run(const spec::Spec& input) {
  namespace fs = std::filesystem;
  spec::Spec spec = input;
  spec.working_dir = fs::absolute(spec.working_dir).lexically_normal().string();
  node::Facts facts = node::gather_facts();
  node::topo::NodeTopology topology;
  if (spec.nodes.provider == spec::Provider::local) {
    // validate() has read nodes.topology already, so it loads.
    topology = spec.nodes.topology.empty() ? node::topo::summarize(node::topo::live_topology(), "live")
                                           : node::topo::load_topology_file(spec.nodes.topology).value;
  }
  std::vector<spec::NodeInfo> nodes;
  int count = spec.nodes.provider == spec::Provider::static_list ? static_cast<int>(spec.nodes.agents.size())
                                                                 : spec.nodes.max_count;
  if (spec.nodes.provider == spec::Provider::slurm && count == 0) {
    try {
      count = controller::slurm_node_count(spec);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtrain: %s\n", e.what());
      return 2;
    }
    // As the slurm provider does at launch: no nodes.count means the allocation's node count.
    spec.nodes.min_count = spec.nodes.max_count = count;
  }
  for (int i = 0; i < count; ++i) {
    spec::NodeInfo info;
    if (spec.nodes.provider == spec::Provider::static_list) {
      const std::string& agent = spec.nodes.agents[static_cast<std::size_t>(i)];
      info.address = host_of(agent);
      info.agent_address = agent;
      info.hostname = info.address;
      info.host_id = agent;
    } else if (spec.nodes.provider == spec::Provider::ssh) {
      const auto host = spec::parse_ssh_host(spec.nodes.hosts[static_cast<std::size_t>(i)]);
      info.address = host ? host->host : spec.nodes.hosts[static_cast<std::size_t>(i)];
      info.agent_address = info.address + ":<agent port at launch>";
      info.hostname = info.address;
      info.host_id = info.address;
    } else if (spec.nodes.provider == spec::Provider::slurm) {
      info.address = "<slurm node " + std::to_string(i) + ">";
      info.agent_address = info.address + ":<agent port at launch>";
      info.hostname = info.address;
      info.host_id = info.address;
    } else {
      info.address = "127.0.0.1";
      info.agent_address = "127.0.0.1:<agent port at launch>";
      info.hostname = facts.hostname;
      info.host_id = facts.host_id;
    }
    // Remote nodes report their CPUs when they connect; the dry run shows this machine's.
    info.cpus = facts.cpus;
    info.cpu_numa = facts.cpu_numa;
    info.gpu_count = facts.gpu_count;
    if (spec.nodes.provider == spec::Provider::local) {  // local agents place ranks by this host's topology
      info.topology = topology;
      if (!topology.ranks.empty()) info.gpu_count = static_cast<unsigned>(topology.ranks.size());
    }
    nodes.push_back(std::move(info));
  }
  spec::RoundInfo round;
  round.job_id = spec.name + "-" + timestamp_now();
  round.master_addr = nodes.empty() ? "" : nodes.front().address;
  round.attempt_dir = (fs::absolute(spec.logs.dir) / round.job_id / "attempt_0").lexically_normal().string();
  try {
    spec::Plan plan = spec::make_plan(spec, nodes, round);
    std::string text = spec::render_plan(spec, plan);
    std::fwrite(text.data(), 1, text.size(), stdout);
    print_remote_agent_commands(spec, count);
    if (!print_trainer_grid(spec, plan)) return 2;
  } catch (const spec::PlanError& e) {
    std::fprintf(stderr, "dtrain: cannot plan the job: %s\n", e.what());
    return 2;
  }
  return 0;
}

void add_launch_flags(CLI::App& cmd, LaunchFlags& flags) {
  cmd.add_flag("--insecure", flags.insecure, "talk to agents off loopback in plaintext without authentication");
  cmd.add_option("--secret-dir", flags.secret_dir, "cluster secret for TLS (default: $DTRAIN_SECRET_DIR or ~/.dtrain)");
}

Action add_launch_command(CLI::App& app) {
  struct Args {
    std::string file;
    std::vector<std::string> sets;
    bool dry_run = false;
    std::string tune;
    LaunchFlags flags;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("launch", "Run a job described by a YAML spec");
  cmd->add_option("spec", args->file, "job spec (YAML)")->required();
  cmd->add_option("--set", args->sets, "override a key of the spec, e.g. --set nodes.count=2 (repeatable)");
  cmd->add_flag("--dry-run", args->dry_run, "print every rank's host, binding and environment; start nothing");
  cmd->add_option("--tune", args->tune, "a tune overlay (tune.yaml): DataLoader, DDP, thread and NCCL knobs applied "
                                        "to an unmodified PyTorch script");
  add_launch_flags(*cmd, args->flags);
  return [args]() {
    std::optional<spec::Spec> spec = load_spec_or_report(args->file, args->sets);
    if (!spec) return 2;
    if (!apply_tune_or_report(args->tune, *spec)) return 2;
    if (args->dry_run) return print_dry_run(*spec);
    return launch_job(std::move(*spec), args->flags);
  };
}

}  // namespace dtrain::cli

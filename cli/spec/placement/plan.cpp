// Spec + nodes + round -> one WorkerPlan per rank.
//
// Ranks: node ranks follow the order of `nodes`; rank = node_rank * workers_per_node + local_rank.
//
// Worker environment, lowest precedence first (a later layer overwrites an earlier one):
//   1. defaults: TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (a collective that fails aborts the communicator and the worker
//      exits, instead of hanging until the watchdog), OMP_NUM_THREADS = the worker's CPU share (binding.h, or
//      gpu_placement.h), PYTHONUNBUFFERED=1 (stdout is a pipe to the agent, and Python would otherwise hold rank
//      0's output back until its buffer fills); for a worker placed by GPU, its GPU's variables (gpu_placement.h:
//      DTRAIN_GPU, ..., and with nccl.auto the NCCL variables `dtrain topo` recommends for its local rank).
//   2. automatic tuning, when nccl.auto: the node's tuned_env (the socket interface the launcher chose); then, for
//      provider local, NCCL_SOCKET_IFNAME=lo and GLOO_SOCKET_IFNAME=lo, because every simulated node is this
//      machine and its peers are reached on loopback.
//   3. nodes.interface, when set: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME = that interface (an explicit choice,
//      so it applies even without nccl.auto).
//   4. nccl.env, then env (env wins). Deprecated names are resolved here, once, with a warning in Plan.warnings:
//      NCCL_ASYNC_ERROR_HANDLING becomes TORCH_NCCL_ASYNC_ERROR_HANDLING (dropped if that is set as well);
//      TORCH_NCCL_AVOID_RECORD_STREAMS is passed on with an explanation.
//      Then the tune overlay's (spec.tune_env, `--tune`: DTRAIN_TUNE and its NCCL_* / PYTORCH_CUDA_ALLOC_CONF), over
//      both: the overlay was named for this run.
//   5. the identity variables (RANK, ..., DTRAIN_RESTART_COUNT; env_names.h): always dtrain's, validate() refuses
//      them in a spec.
// Values not known before launch (MASTER_PORT, DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN, ...) are kReservedAtLaunch
// in a dry run.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "cli/spec/placement/binding.h"
#include "cli/spec/placement/gpu_placement.h"
#include "cli/spec/spec.h"

namespace dtrain::spec {
namespace {

using detail::node_name;

using Env = std::map<std::string, std::string>;

std::string or_reserved(const std::string& value) {
  return value.empty() ? std::string(kReservedAtLaunch) : value;
}

std::string count_text(const Spec::Nodes& nodes) {
  if (nodes.min_count == nodes.max_count) return std::to_string(nodes.min_count);
  return "between " + std::to_string(nodes.min_count) + " and " + std::to_string(nodes.max_count);
}

unsigned resolve_workers_per_node(const Spec& spec, const std::vector<NodeInfo>& nodes) {
  using Kind = Spec::WorkersPerNode::Kind;
  const auto& wpn = spec.workers_per_node;
  if (wpn.kind == Kind::count) {
    if (wpn.count < 1 || wpn.count > kMaxWorkersPerNode) {
      throw PlanError("workers_per_node must be 1 to " + std::to_string(kMaxWorkersPerNode) + ", got " +
                      std::to_string(wpn.count));
    }
    return static_cast<unsigned>(wpn.count);
  }
  const bool gpu = wpn.kind == Kind::gpu;
  const char* what = gpu ? "GPU" : "CPU";
  std::vector<unsigned> counts;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const unsigned n = gpu ? nodes[i].gpu_count : static_cast<unsigned>(nodes[i].cpus.size());
    if (n == 0) {
      throw PlanError(std::string("workers_per_node: ") + (gpu ? "gpu" : "cpu") + " but " + node_name(i, nodes[i]) +
                      " has no " + what + "; use an integer");
    }
    if (n > static_cast<unsigned>(kMaxWorkersPerNode)) {
      throw PlanError(std::string("workers_per_node: ") + (gpu ? "gpu" : "cpu") + " gives " + std::to_string(n) +
                      " workers on " + node_name(i, nodes[i]) + "; a node runs at most " +
                      std::to_string(kMaxWorkersPerNode) + ": use an integer");
    }
    counts.push_back(n);
  }
  if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end()) {
    std::string detail;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      detail += (i ? ", " : "") + node_name(i, nodes[i]) + " has " + std::to_string(counts[i]) + " " + what + "s";
    }
    throw PlanError(std::string("workers_per_node: ") + (gpu ? "gpu" : "cpu") +
                    " gives a different number of workers per node (" + detail +
                    "); every node must run the same number: use an integer, e.g. workers_per_node: " +
                    std::to_string(*std::min_element(counts.begin(), counts.end())));
  }
  return counts.front();
}

// nccl.env overlaid by env, with the deprecated names resolved.
Env user_env(const Spec& spec, std::vector<std::string>& warnings) {
  Env env = spec.nccl.env;
  for (const auto& [name, value] : spec.env) env[name] = value;
  const auto origin = [&](const std::string& name) { return spec.env.count(name) ? "env" : "nccl.env"; };

  const std::string old_async = "NCCL_ASYNC_ERROR_HANDLING", new_async = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
  if (const auto it = env.find(old_async); it != env.end()) {
    const std::string value = it->second;
    const std::string where = origin(old_async);
    env.erase(it);
    if (env.count(new_async)) {
      warnings.push_back(where + ": " + old_async + " is deprecated and was not passed on: " + new_async +
                         " is set too and replaces it. Remove " + old_async + ".");
    } else {
      env[new_async] = value;
      warnings.push_back(where + ": " + old_async + " is deprecated (PyTorch reads " + new_async +
                         "); passed to workers as " + new_async + "=" + value + ". Rename it in the spec.");
    }
  }
  const std::string record_streams = "TORCH_NCCL_AVOID_RECORD_STREAMS";
  if (env.count(record_streams)) {
    warnings.push_back(std::string(origin(record_streams)) + ": " + record_streams +
                       " is deprecated: recent PyTorch avoids recordStream in ProcessGroupNCCL by default, so the "
                       "variable has no effect there except a warning. Passed on unchanged for older PyTorch; "
                       "remove it if you run a recent one.");
  }
  return env;
}

std::string join_path(const std::string& dir, const std::string& file) {
  return dir.empty() ? file : (std::filesystem::path(dir) / file).string();
}

// The number of nodes, checked against the limit and nodes.count.
unsigned checked_node_count(const Spec& spec, const std::vector<NodeInfo>& nodes) {
  if (nodes.empty()) throw PlanError("no nodes to run the job on");
  if (spec.command.empty()) throw PlanError("the job has no command");
  // Sizes are checked in 64 bits before any is narrowed, so no product below can wrap (spec.h: limits).
  if (nodes.size() > static_cast<std::size_t>(kMaxNodes)) {
    throw PlanError(std::to_string(nodes.size()) + " nodes; a job runs on at most " + std::to_string(kMaxNodes));
  }
  const auto nnodes = static_cast<unsigned>(nodes.size());
  if (static_cast<int>(nnodes) < spec.nodes.min_count || static_cast<int>(nnodes) > spec.nodes.max_count) {
    throw PlanError("the job needs " + count_text(spec.nodes) + " nodes (nodes.count) but " +
                    std::to_string(nnodes) + " joined");
  }
  return nnodes;
}

unsigned checked_world_size(unsigned nnodes, unsigned workers_per_node) {
  const std::uint64_t world = std::uint64_t{nnodes} * workers_per_node;
  if (world > static_cast<std::uint64_t>(kMaxWorldSize)) {
    throw PlanError(std::to_string(workers_per_node) + " workers on each of " + std::to_string(nnodes) +
                    " nodes make " + std::to_string(world) + " ranks; a job has at most " +
                    std::to_string(kMaxWorldSize) + ": lower workers_per_node or nodes.count");
  }
  return static_cast<unsigned>(world);
}

// The CPU share of each worker, by node rank then local rank. Nodes with the same host_id are one machine: their
// workers split its CPUs between them, unless they are placed by GPU (gpu_placement.h): then each rank gets the
// CPUs near its GPU.
std::vector<std::vector<detail::CpuShare>> share_cpus(const Spec& spec, const std::vector<NodeInfo>& nodes,
                                                      unsigned workers_per_node, std::vector<std::string>& warnings) {
  std::map<std::string, std::vector<unsigned>> hosts;  // host key -> node ranks on it
  for (unsigned n = 0; n < nodes.size(); ++n) {
    hosts[nodes[n].host_id.empty() ? nodes[n].hostname : nodes[n].host_id].push_back(n);
  }
  std::vector<std::vector<detail::CpuShare>> shares(nodes.size());
  for (const auto& [host, ranks] : hosts) {
    const bool by_gpu = spec.binding == Binding::automatic && std::all_of(ranks.begin(), ranks.end(), [&](unsigned n) {
      return detail::placed_gpu(nodes[n], workers_per_node, 0) != nullptr;
    });
    if (by_gpu) {
      for (unsigned n : ranks) {
        shares[n] = detail::share_gpu_cpus(nodes[n], workers_per_node, node_name(n, nodes[n]), warnings);
      }
      continue;
    }
    const NodeInfo& first = nodes[ranks.front()];
    const unsigned workers = static_cast<unsigned>(ranks.size()) * workers_per_node;
    const auto host_shares = detail::share_host_cpus(first.cpus, first.cpu_numa, workers, spec.binding);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      shares[ranks[i]].assign(host_shares.begin() + i * workers_per_node,
                              host_shares.begin() + (i + 1) * workers_per_node);
    }
    const std::string name = first.hostname.empty() ? host : first.hostname;
    if (first.cpus.empty()) {
      warnings.push_back("host " + name + " reported no CPUs: its workers are not pinned and get "
                         "OMP_NUM_THREADS=1");
    } else if (workers > first.cpus.size()) {
      warnings.push_back("host " + name + ": " + std::to_string(workers) + " workers share " +
                         std::to_string(first.cpus.size()) + " CPUs" +
                         (spec.binding == Binding::automatic ? "; each is pinned to one CPU, round-robin," : ";") +
                         " with OMP_NUM_THREADS=1");
    }
  }
  return shares;
}

// The ranks that logs.console lists and the job has.
std::set<unsigned> listed_console_ranks(const Spec& spec, unsigned world_size, std::vector<std::string>& warnings) {
  std::set<unsigned> console_ranks;
  for (const int r : spec.logs.console_ranks) {
    if (r >= 0 && static_cast<unsigned>(r) < world_size) {
      console_ranks.insert(static_cast<unsigned>(r));
    } else if (spec.logs.console == Spec::Logs::Console::ranks) {
      warnings.push_back("logs.console lists rank " + std::to_string(r) + ", but the job has " +
                         std::to_string(world_size) + " ranks; it is ignored");
    }
  }
  return console_ranks;
}

// What every worker of the plan is built from.
struct Job {
  const Spec& spec;
  const RoundInfo& round;
  const Plan& plan;
  Env user;  // layer 4: nccl.env then env, deprecated names resolved
  std::vector<std::vector<detail::CpuShare>> shares;  // [node rank][local rank]
  std::set<unsigned> console_ranks;                   // from logs.console, only ranks that exist
  std::string master_addr;
  std::vector<std::string> argv;
};

// Layers 1-4 of the worker environment (top of this file). `gpu`: the GPU the worker is placed on, or nullptr.
void set_layered_env(const Job& job, const NodeInfo& node, const detail::CpuShare& share,
                     const node::topo::RankTopology* gpu, Env& env) {
  const Spec& spec = job.spec;
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  env["OMP_NUM_THREADS"] = std::to_string(share.omp_threads);
  env["PYTHONUNBUFFERED"] = "1";
  if (gpu) detail::set_gpu_env(spec, *gpu, env);
  if (spec.nccl.automatic) {
    for (const auto& [name, value] : node.tuned_env) env[name] = value;
    if (spec.nodes.provider == Provider::local) env["NCCL_SOCKET_IFNAME"] = env["GLOO_SOCKET_IFNAME"] = "lo";
  }
  if (!spec.nodes.interface.empty()) {
    env["NCCL_SOCKET_IFNAME"] = env["GLOO_SOCKET_IFNAME"] = spec.nodes.interface;
  }
  for (const auto& [name, value] : job.user) env[name] = value;
  for (const auto& [name, value] : spec.tune_env) env[name] = value;
}

// Layer 5: the identity variables, always dtrain's.
void set_identity_env(const Job& job, const NodeInfo& node, const WorkerPlan& w, Env& env) {
  const RoundInfo& round = job.round;
  env["RANK"] = env["ROLE_RANK"] = std::to_string(w.rank);
  env["LOCAL_RANK"] = std::to_string(w.local_rank);
  env["WORLD_SIZE"] = env["ROLE_WORLD_SIZE"] = std::to_string(job.plan.world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(job.plan.workers_per_node);
  env["GROUP_RANK"] = env["DTRAIN_NODE_RANK"] = std::to_string(w.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(job.plan.nnodes);
  env["ROLE_NAME"] = "default";
  env["MASTER_ADDR"] = or_reserved(job.master_addr);
  env["MASTER_PORT"] = round.master_port ? std::to_string(round.master_port) : std::string(kReservedAtLaunch);
  env["TORCHELASTIC_RESTART_COUNT"] = env["DTRAIN_RESTART_COUNT"] = std::to_string(round.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(job.spec.restart.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = env["DTRAIN_JOB_ID"] = or_reserved(round.job_id);
  // Rank 0 hosts PyTorch's own TCPStore on MASTER_PORT (env:// init), as under torchrun without an agent store.
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env["TORCHELASTIC_ERROR_FILE"] = w.error_file;
  env["DTRAIN_STORE_ADDR"] = or_reserved(round.store_address);
  env["DTRAIN_JOB_TOKEN"] = or_reserved(round.store_token);
  env["DTRAIN_AGENT_ADDR"] = or_reserved(node.agent_address);
  env["DTRAIN_HEALTH_INTERVAL_MS"] = std::to_string(health_interval(job.spec.health).count());
}

WorkerPlan plan_worker(const Job& job, const NodeInfo& node, unsigned node_rank, unsigned local_rank) {
  const Spec& spec = job.spec;
  WorkerPlan w;
  w.rank = node_rank * job.plan.workers_per_node + local_rank;
  w.local_rank = local_rank;
  w.node_rank = node_rank;
  w.host = node.hostname;
  w.argv = job.argv;
  w.working_dir = spec.working_dir;
  const detail::CpuShare& share = job.shares[node_rank][local_rank];
  w.cpus = share.cpus;
  w.log_path = join_path(job.round.attempt_dir, "rank_" + std::to_string(w.rank) + ".log");
  w.error_file = join_path(job.round.attempt_dir, "rank_" + std::to_string(w.rank) + "_error.json");
  const bool shown = spec.logs.console == Spec::Logs::Console::all ||
                     (spec.logs.console == Spec::Logs::Console::rank0 && w.rank == 0) ||
                     (spec.logs.console == Spec::Logs::Console::ranks && job.console_ranks.count(w.rank));
  w.stream_stdout = w.stream_stderr = shown;
  const node::topo::RankTopology* gpu = detail::placed_gpu(node, job.plan.workers_per_node, local_rank);
  if (gpu) {
    w.gpu = gpu->gpu;
    w.nics = gpu->nics;
  }
  set_layered_env(job, node, share, gpu, w.env);
  set_identity_env(job, node, w, w.env);
  if (auto it = w.env.find("OMP_NUM_THREADS"); it != w.env.end()) {
    w.omp_threads = static_cast<unsigned>(std::strtoul(it->second.c_str(), nullptr, 10));
  }
  return w;
}

}  // namespace

Plan make_plan(const Spec& spec, const std::vector<NodeInfo>& nodes, const RoundInfo& round) {
  Plan plan;
  plan.nnodes = checked_node_count(spec, nodes);
  plan.workers_per_node = resolve_workers_per_node(spec, nodes);
  plan.world_size = checked_world_size(plan.nnodes, plan.workers_per_node);
  detail::check_gpu_placement(spec, nodes, plan.workers_per_node, plan.warnings);
  // Braced initialisers run in order: the warnings come in the order of the fields.
  const Job job{spec,
                round,
                plan,
                user_env(spec, plan.warnings),
                share_cpus(spec, nodes, plan.workers_per_node, plan.warnings),
                listed_console_ranks(spec, plan.world_size, plan.warnings),
                !round.master_addr.empty() ? round.master_addr : nodes.front().address,
                spec.shell ? std::vector<std::string>{"/bin/sh", "-c", spec.command.front()} : spec.command};
  for (unsigned node_rank = 0; node_rank < plan.nnodes; ++node_rank) {
    for (unsigned local_rank = 0; local_rank < plan.workers_per_node; ++local_rank) {
      plan.workers.push_back(plan_worker(job, nodes[node_rank], node_rank, local_rank));
    }
  }
  return plan;
}

}  // namespace dtrain::spec

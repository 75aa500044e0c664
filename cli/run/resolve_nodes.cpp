// The steps of --nnodes, --node-rank and --nproc-per-node (option_table.h): how many nodes, which one this is, and
// how many workers each runs.

#include "cli/run/multi_node_checks.h"
#include "cli/run/option_table.h"
#include "cli/run/option_values.h"

namespace dtrain::cli::run {

// --nnodes (and --standalone, whose conflict is named before the multi-node refusal). Under srun, --nnodes defaults
// to the step's node count.
std::string resolve_nnodes(Resolution& res) {
  const TorchrunArgs& a = res.a;
  const HostFacts& host = res.host;
  res.nnodes = a.nnodes;
  if (res.nnodes.empty() && !a.standalone && !host.slurm_node_id.empty() && !host.slurm_step_nodes.empty()) {
    const auto n = parse_int(host.slurm_step_nodes, 1, 1 << 20);
    if (auto why = check_slurm_step_nodes(host.slurm_step_nodes, n); !why.empty()) return why;
    if (*n > 1) res.nnodes = host.slurm_step_nodes;
  }
  if (res.nnodes.empty()) return "";
  const std::string& nnodes = res.nnodes;
  auto parts = split(nnodes, ':');
  std::optional<long> lo = parse_int(parts[0], 1, 1 << 20);
  std::optional<long> hi = parts.size() == 2 ? parse_int(parts[1], 1, 1 << 20) : lo;
  if (parts.size() > 2 || !lo || !hi || *lo > *hi) {
    return "dtrain run: --nnodes must be N or MIN:MAX with 1 <= MIN <= MAX (got '" + nnodes + "')";
  }
  if (*hi <= 1) return "";
  if (a.standalone) {
    return "dtrain run: --standalone runs one node, and --nnodes " + nnodes + " asks for more: leave one of them out";
  }
  if (res.nodes > 1) {
    return "dtrain run: --nodes " + std::to_string(res.nodes) + " simulates nodes on this machine, and --nnodes " +
           nnodes + " runs on real ones: give one of them";
  }
  res.r.multi = Resolved::MultiNode{static_cast<int>(*lo), static_cast<int>(*hi), "", false, std::nullopt};
  return "";
}

// --node-rank, else SLURM_NODEID under srun; below the most nodes the job can have.
std::string resolve_node_rank(Resolution& res) {
  const TorchrunArgs& a = res.a;
  auto& multi = res.r.multi;
  if (!a.node_rank.empty()) {
    auto rank = parse_int(a.node_rank, 0, 1 << 20);
    if (!rank) return "dtrain run: --node-rank must be a whole number >= 0 (got '" + a.node_rank + "')";
    if (!multi && *rank != 0) {
      return "dtrain run: --node-rank " + a.node_rank + " needs --nnodes above 1 (the same command on every node)";
    }
    if (multi) multi->node_rank = static_cast<unsigned>(*rank);
  }
  if (multi && !multi->node_rank && !res.host.slurm_node_id.empty()) {
    auto rank = parse_int(res.host.slurm_node_id, 0, 1 << 20);
    if (!rank) return "dtrain run: SLURM_NODEID is '" + res.host.slurm_node_id + "', not a node number";
    multi->node_rank = static_cast<unsigned>(*rank);
  }
  if (!multi || !multi->node_rank) return "";
  const std::string source = a.node_rank.empty() ? "SLURM_NODEID" : "--node-rank";
  return check_node_rank(*multi->node_rank, multi->max_nodes, source, res.nnodes);
}

// --nproc-per-node: a number, or cpu, auto, gpu from this machine's facts.
std::string resolve_nproc(Resolution& res) {
  const std::string& value = res.a.nproc_per_node;
  const HostFacts& host = res.host;
  if (value == "cpu") {
    res.r.nproc = host.cpu_count;
  } else if (value == "auto") {
    res.r.nproc = host.gpu_count > 0 ? host.gpu_count : host.cpu_count;
  } else if (value == "gpu") {
    if (host.gpu_count == 0) {
      return "dtrain run: --nproc-per-node gpu: this machine has no GPUs (no NVIDIA driver lists one under "
             "/proc/driver/nvidia/gpus); give a number, or cpu";
    }
    res.r.nproc = host.gpu_count;
  } else if (auto n = parse_int(value, 1, 2147483647)) {  // validate() bounds it, naming workers_per_node
    res.r.nproc = static_cast<int>(*n);
  } else {
    return "dtrain run: --nproc-per-node must be a number >= 1, cpu, auto or gpu (got '" + value + "')";
  }
  return "";
}

}  // namespace dtrain::cli::run

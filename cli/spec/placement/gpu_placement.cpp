#include "cli/spec/placement/gpu_placement.h"

#include <algorithm>
#include <map>

#include "agent/node/facts.h"
#include "agent/node/topology/report.h"
#include "common/os/cpu_list.h"

namespace dtrain::spec::detail {
namespace {

// The CPUs of `list` that `have` holds, in the list's order.
std::vector<unsigned> present(const std::string& list, const std::vector<unsigned>& have) {
  std::vector<unsigned> out;
  for (unsigned cpu : dtrain::parse_cpu_list(list)) {
    if (std::find(have.begin(), have.end(), cpu) != have.end()) out.push_back(cpu);
  }
  return out;
}

// Share `part` of `parts` of `cpus`: contiguous by topo::cpu_share when there are enough, else one, round robin.
std::vector<unsigned> share_of(const std::vector<unsigned>& cpus, std::size_t part, std::size_t parts) {
  if (cpus.size() < parts) return {cpus[part % cpus.size()]};
  return dtrain::parse_cpu_list(node::topo::cpu_share(format_cpu_list(cpus), part, parts));
}

}  // namespace

std::string node_name(std::size_t index, const NodeInfo& node) {
  return "node " + std::to_string(index) + " (" + (node.hostname.empty() ? "?" : node.hostname) + ")";
}

const node::topo::RankTopology* placed_gpu(const NodeInfo& node, unsigned workers_per_node, unsigned local_rank) {
  const auto& ranks = node.topology.ranks;
  if (ranks.empty() || workers_per_node > ranks.size() || local_rank >= ranks.size()) return nullptr;
  return &ranks[local_rank];
}

std::vector<CpuShare> share_gpu_cpus(const NodeInfo& node, unsigned workers_per_node, const std::string& name,
                                     std::vector<std::string>& warnings) {
  const auto& ranks = node.topology.ranks;
  std::map<std::string, std::size_t> users, seen;  // cpu_affinity -> ranks of this job on it, ranks shared so far
  for (unsigned i = 0; i < workers_per_node; ++i) ++users[ranks[i].cpu_affinity];
  std::vector<CpuShare> shares(workers_per_node);
  std::string unpinned;
  for (unsigned i = 0; i < workers_per_node; ++i) {
    const auto& affinity = ranks[i].cpu_affinity;
    const std::vector<unsigned> cpus = present(affinity, node.cpus);
    const std::size_t part = seen[affinity]++;
    if (cpus.empty()) {
      shares[i].omp_threads = std::max<unsigned>(1, static_cast<unsigned>(node.cpus.size()) / workers_per_node);
      unpinned += (unpinned.empty() ? "" : ", ") + std::to_string(i) + " (GPU" + std::to_string(ranks[i].gpu) +
                  ", CPUs " + (affinity.empty() ? "unknown" : affinity) + ")";
      continue;
    }
    shares[i].cpus = share_of(cpus, part, users[affinity]);
    shares[i].omp_threads = static_cast<unsigned>(shares[i].cpus.size());
  }
  if (!unpinned.empty()) {
    warnings.push_back(name + ": the topology puts local ranks " + unpinned + " near CPUs this node does not have " +
                       "(it has " + format_cpu_list(node.cpus) + "): they are not pinned. Check that the node's " +
                       "topology (nodes.topology, `dtrain agent --topology`) is this machine's.");
  }
  return shares;
}

void set_gpu_env(const Spec& spec, const node::topo::RankTopology& gpu, std::map<std::string, std::string>& env) {
  env["DTRAIN_GPU"] = std::to_string(gpu.gpu);
  if (!gpu.bus_id.empty()) env["DTRAIN_GPU_BUS_ID"] = gpu.bus_id;
  if (!gpu.cpu_affinity.empty()) env["DTRAIN_CPU_AFFINITY"] = gpu.cpu_affinity;
  if (spec.gpu_isolation) {
    env["CUDA_VISIBLE_DEVICES"] = std::to_string(gpu.gpu);
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  }
  if (spec.nccl.automatic) {
    for (const auto& [name, value] : gpu.env) env[name] = value;
  }
}

void check_gpu_placement(const Spec& spec, const std::vector<NodeInfo>& nodes, unsigned workers_per_node,
                         std::vector<std::string>& warnings) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeInfo& node = nodes[i];
    const std::size_t gpus = node.topology.ranks.size();
    if (spec.gpu_isolation && placed_gpu(node, workers_per_node, 0) == nullptr) {
      throw PlanError("gpu_isolation: true, but " + node_name(i, node) + " has " + std::to_string(gpus) +
                      " GPUs in its topology for " + std::to_string(workers_per_node) +
                      " workers: each worker needs a GPU of its own. Use workers_per_node: gpu, or give the node's "
                      "agent its topology (`dtrain agent --topology FILE`, nodes.topology), or remove gpu_isolation");
    }
    if (gpus > 0 && workers_per_node > gpus) {
      warnings.push_back(node_name(i, node) + ": " + std::to_string(workers_per_node) + " workers but " +
                         std::to_string(gpus) + " GPUs in its topology: its ranks are not placed by GPU");
    }
    for (const auto& warning : node.topology.warnings) warnings.push_back(node_name(i, node) + ": " + warning);
  }
}

}  // namespace dtrain::spec::detail

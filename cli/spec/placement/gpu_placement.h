#pragma once

// Placing a node's ranks by its GPUs, from the topology its agent sent (node_topology.h): local rank i runs on the
// i-th GPU `dtrain topo` lists, near that GPU's CPUs and NICs.
//
// A node's workers are placed by GPU when its topology lists at least workers_per_node GPUs (workers_per_node: gpu,
// or a count up to the GPU count). For local rank i on g = topology.ranks[i] (layer 1 of plan.cpp's environment,
// so nccl.env and env still win):
//   DTRAIN_GPU            g.gpu
//   DTRAIN_GPU_BUS_ID     g.bus_id, when the topology knows it (a live scan; an imported one does not)
//   DTRAIN_CPU_AFFINITY   g.cpu_affinity: the whole list near the GPU, in the topology's notation, so scripts can
//                         place their own threads (DataLoader workers) too
//   CUDA_VISIBLE_DEVICES  g.gpu, only with gpu_isolation (and CUDA_DEVICE_ORDER=PCI_BUS_ID, so that CUDA counts
//                         GPUs as nvidia-smi does); else unset, and scripts select with LOCAL_RANK as under torchrun
//   g.env                 with nccl.auto: what `dtrain topo` recommends (NCCL_IB_HCA, NCCL_CROSS_NIC), below the
//                         launcher's socket interface
// binding auto: the CPUs of g.cpu_affinity that the node has (its agent's affinity mask) are shared evenly among
//   the ranks whose GPUs have the same cpu_affinity, in local-rank order (topo::cpu_share: each range split on its
//   own, so hyperthread siblings stay with their cores); with fewer such CPUs than ranks, one each, round robin.
//   OMP_NUM_THREADS = the share's size. A topology may name CPUs this node does not have: a rank whose GPU's CPUs
//   the node has none of is not pinned (OMP_NUM_THREADS = the node's CPUs / its workers), said once per node.

#include <string>
#include <vector>

#include "cli/spec/placement/binding.h"
#include "cli/spec/spec.h"

namespace dtrain::spec::detail {

// "node 3 (gpu-a7)": how plans name a node in their messages.
std::string node_name(std::size_t index, const NodeInfo& node);

// The GPU local rank `local_rank` runs on, or nullptr when the node's workers are not placed by GPU.
const node::topo::RankTopology* placed_gpu(const NodeInfo& node, unsigned workers_per_node, unsigned local_rank);

// binding auto on a node placed by GPU: one share per local rank. `name` names the node in the warning.
std::vector<CpuShare> share_gpu_cpus(const NodeInfo& node, unsigned workers_per_node, const std::string& name,
                                     std::vector<std::string>& warnings);

// The variables above for a rank placed on `gpu` (without the NCCL ones when nccl.auto is off).
void set_gpu_env(const Spec& spec, const node::topo::RankTopology& gpu, std::map<std::string, std::string>& env);

// What the nodes' topologies warn about, once per node, and nodes whose GPUs are fewer than their workers. Throws
// PlanError when gpu_isolation is asked for and a node's workers are not placed by GPU.
void check_gpu_placement(const Spec& spec, const std::vector<NodeInfo>& nodes, unsigned workers_per_node,
                         std::vector<std::string>& warnings);

}  // namespace dtrain::spec::detail

// Placing ranks by GPU (cli/spec/placement/gpu_placement.h): each rank's GPU, CPUs and NCCL variables against what
// `dtrain topo` recommends for the same saved topology (the analysis, not numbers written here), and the spec keys
// gpu_isolation and nodes.topology.

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "agent/node/facts.h"
#include "common/os/cpu_list.h"
#include "agent/node/topology/node_topology.h"
#include "agent/node/topology/report.h"
#include "cli/spec/spec.h"
#include "tests/unit/spec_only_error.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::spec;

namespace {

const std::string kHgx = std::string(DTRAIN_TOPO_FIXTURES) + "/hgx_h100_8gpu_8nic.txt";
const std::string kPcie = std::string(DTRAIN_TOPO_FIXTURES) + "/pcie_2x5090_tabs.txt";

// The reference: what `dtrain topo --import FILE` reports.
node::topo::Report reference(const std::string& file) {
  auto report = node::topo::import_topology_file(file);
  REQUIRE(report.ok());
  return report.value;
}

// A node whose agent read `file` (`dtrain agent --topology FILE`) and may use CPUs [0, ncpus).
NodeInfo node_with(const std::string& file, unsigned ncpus, const std::string& name = "gpu-a") {
  NodeInfo n;
  n.hostname = n.host_id = name;
  n.address = "10.0.0.1";
  n.agent_address = "10.0.0.1:29400";
  for (unsigned c = 0; c < ncpus; ++c) n.cpus.push_back(c);
  auto topology = node::topo::load_topology_file(file);
  REQUIRE(topology.ok());
  n.topology = topology.value;
  n.gpu_count = static_cast<unsigned>(n.topology.ranks.size());
  return n;
}

Plan plan_of(const std::string& yaml, const std::vector<NodeInfo>& nodes) {
  RoundInfo round;
  round.job_id = "job-1";
  round.attempt_dir = "/tmp/runs/job-1/attempt_0";
  return make_plan(load_spec_string(yaml, "job.yaml", {}), nodes, round);
}

const std::string kStatic = "name: x\ncommand: [a]\nnodes: {provider: static, agents: [10.0.0.1:29400]}\n";

bool has_warning(const Plan& plan, const std::string& part) {
  for (const auto& w : plan.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("workers_per_node: gpu on an 8-GPU box: each rank gets what dtrain topo recommends for its local rank") {
  const auto ref = reference(kHgx);
  const Plan plan = plan_of(kStatic + "workers_per_node: gpu\n", {node_with(kHgx, 192)});
  REQUIRE(plan.workers.size() == ref.local_ranks.size());
  for (const auto& w : plan.workers) {
    const auto& rank = ref.local_ranks[w.local_rank];
    CAPTURE(w.local_rank);
    CHECK(w.env.at("DTRAIN_GPU") == std::to_string(rank.gpu));
    CHECK(w.gpu == rank.gpu);
    CHECK(w.env.at("DTRAIN_CPU_AFFINITY") == ref.gpus[w.local_rank].cpu_affinity);
    CHECK(w.env.count("DTRAIN_GPU_BUS_ID") == 0);  // an import knows no bus ids
    CHECK(w.env.count("CUDA_VISIBLE_DEVICES") == 0);
    for (const auto& [name, value] : rank.env) CHECK(w.env.at(name) == value);
    // Every CPU of the topology exists here: the share is exactly topo's.
    CHECK(w.cpus == dtrain::parse_cpu_list(*rank.cpus));
    CHECK(w.env.at("OMP_NUM_THREADS") == std::to_string(w.cpus.size()));
    CHECK(w.nics.front() == *rank.nic);
  }
  CHECK(plan.workers[3].env.at("NCCL_CROSS_NIC") == "0");  // rail-optimised: the reference says so too
}

TEST_CASE("gpu_isolation: true sets CUDA_VISIBLE_DEVICES to the rank's own GPU, in nvidia-smi's order") {
  const Plan plan = plan_of(kStatic + "workers_per_node: gpu\ngpu_isolation: true\n", {node_with(kHgx, 192)});
  for (const auto& w : plan.workers) {
    CHECK(w.env.at("CUDA_VISIBLE_DEVICES") == std::to_string(w.local_rank));
    CHECK(w.env.at("CUDA_DEVICE_ORDER") == "PCI_BUS_ID");
  }
  // Isolation with fewer GPUs than workers cannot hold: refused, naming the node and the way out.
  CHECK_THROWS_WITH_AS(plan_of(kStatic + "workers_per_node: 3\ngpu_isolation: true\n", {node_with(kPcie, 64)}),
                       doctest::Contains("node 0 (gpu-a) has 2 GPUs in its topology for 3 workers"), PlanError);
}

TEST_CASE("a count below the GPU count shares each NUMA node's CPUs among the ranks on it; above, no placement") {
  const auto ref = reference(kHgx);
  const Plan four = plan_of(kStatic + "workers_per_node: 4\n", {node_with(kHgx, 192)});
  // GPUs 0-3 sit on NUMA node 0 (0-47,96-143): four ranks split it, 12 cores and their 12 siblings each.
  for (const auto& w : four.workers) {
    CHECK(w.cpus == dtrain::parse_cpu_list(node::topo::cpu_share(ref.gpus[0].cpu_affinity, w.local_rank, 4)));
    CHECK(w.cpus.size() == 24);
  }
  const Plan three = plan_of(kStatic + "workers_per_node: 3\n", {node_with(kPcie, 64)});
  CHECK(three.workers[0].env.count("DTRAIN_GPU") == 0);
  CHECK(has_warning(three, "3 workers but 2 GPUs in its topology: its ranks are not placed by GPU"));
}

TEST_CASE("user env and nccl.env win over the topology's NCCL variables; nccl.auto: false drops them") {
  const Plan plan = plan_of(kStatic + "workers_per_node: gpu\nnccl: {env: {NCCL_IB_HCA: \"=mlx5_9\"}}\n"
                                      "env: {DTRAIN_CPU_AFFINITY: mine}\n",
                            {node_with(kHgx, 192)});
  CHECK(plan.workers[2].env.at("NCCL_IB_HCA") == "=mlx5_9");
  CHECK(plan.workers[2].env.at("DTRAIN_CPU_AFFINITY") == "mine");
  const Plan off = plan_of(kStatic + "workers_per_node: gpu\nnccl: {auto: false}\n", {node_with(kHgx, 192)});
  CHECK(off.workers[2].env.count("NCCL_IB_HCA") == 0);
  CHECK(off.workers[2].env.at("DTRAIN_GPU") == "2");
}

TEST_CASE("CPUs the topology names but the node lacks: pinned to those that exist, else not pinned, said once") {
  const Plan plan = plan_of(kStatic + "workers_per_node: gpu\n", {node_with(kHgx, 2)});
  // GPUs 0-3 are near 0-47,96-143, of which the node has 0 and 1: one each, round robin.
  CHECK(plan.workers[0].cpus == std::vector<unsigned>{0});
  CHECK(plan.workers[1].cpus == std::vector<unsigned>{1});
  CHECK(plan.workers[2].cpus == std::vector<unsigned>{0});
  CHECK(plan.workers[0].env.at("OMP_NUM_THREADS") == "1");
  // GPUs 4-7 are near 48-95,144-191: none here. Not pinned, and the variable still names the topology's list.
  for (unsigned r = 4; r < 8; ++r) {
    CHECK(plan.workers[r].cpus.empty());
    CHECK(plan.workers[r].env.at("DTRAIN_CPU_AFFINITY") == "48-95,144-191");
  }
  int said = 0;
  for (const auto& w : plan.warnings) said += w.find("not pinned") != std::string::npos;
  CHECK(said == 1);
  CHECK(has_warning(plan, "local ranks 4 (GPU4, CPUs 48-95,144-191), 5 (GPU5"));
}

TEST_CASE("the topology's warnings are the plan's, once per node; the dry run shows each rank's GPU and NICs") {
  // Two GPUs on two sockets without NVLink, the one NIC across the socket link from both: topo warns of each.
  TempDir dir("spec-gpu-placement");
  const std::string far = dir.file("far.txt");
  std::ofstream(far) << "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
                        "GPU0\t X \tSYS\tSYS\t0-7\t0\t\tN/A\n"
                        "GPU1\tSYS\t X \tSYS\t8-15\t1\t\tN/A\n"
                        "NIC0\tSYS\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n";
  const auto ref = reference(far);
  REQUIRE(ref.warnings.size() == 3);
  const std::string two = "name: x\ncommand: [a]\nworkers_per_node: gpu\n"
                          "nodes: {provider: static, agents: [10.0.0.1:29400, 10.0.0.2:29400]}\n";
  const Plan plan = plan_of(two, {node_with(far, 16, "a"), node_with(far, 16, "b")});
  for (const auto& w : ref.warnings) {
    CHECK(has_warning(plan, "node 0 (a): " + w));
    CHECK(has_warning(plan, "node 1 (b): " + w));
  }
  const std::string text = render_plan(load_spec_string(two, "job.yaml", {}), plan);
  CHECK(text.find("  gpu:         1\n  nics:        mlx5_0\n") != std::string::npos);
  CHECK(text.find("NCCL_IB_HCA==mlx5_0") != std::string::npos);
}

TEST_CASE("gpu_isolation and nodes.topology: bad values are refused at their line and column") {
  const std::string base = "name: x\ncommand: [a]\n";
  CHECK(load_spec_string(base, "job.yaml", {}).gpu_isolation == false);
  CHECK(load_spec_string(base + "gpu_isolation: true\n", "job.yaml", {}).gpu_isolation);
  CHECK(only_error(base + "gpu_isolation: maybe\n") ==
        "job.yaml:3:16: gpu_isolation: expected true or false, got 'maybe'.");
  CHECK(load_spec_string(base + "nodes: {topology: " + kPcie + "}\n", "job.yaml", {}).nodes.topology == kPcie);
  CHECK(only_error(base + "nodes: {provider: static, agents: [\"h:1\"], topology: " + kPcie + "}\n")
            .rfind("job.yaml:3:54: nodes.topology: is only for provider local (provider is static).", 0) == 0);
  CHECK(only_error(base + "nodes: {topology: /nonexistent/topo.txt}\n")
            .rfind("job.yaml:3:19: nodes.topology: cannot read /nonexistent/topo.txt", 0) == 0);
  // Not an nvidia-smi matrix: the importer's complaint, with the file and its line.
  CHECK(only_error(base + "nodes: {topology: " + std::string(DTRAIN_TOPO_FIXTURES) + "/SOURCES.md}\n")
            .find("SOURCES.md:") != std::string::npos);
}

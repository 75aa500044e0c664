// The numbers a multi-node `dtrain run` checks on the node that gives them, before it dials anyone
// (cli/run/multi_node_checks.h): a node rank below --nnodes' maximum, a SLURM_STEP_NUM_NODES that is a node count,
// and --rdzv-conf timeouts the heartbeats can serve. Each refusal names the option or variable and its value.

#include <doctest/doctest.h>

#include "cli/run/torchrun_options.h"
#include "cli/spec/spec.h"

namespace run_bounds_test {

using dtrain::cli::run::HostFacts;
using dtrain::cli::run::Resolved;
using dtrain::cli::run::TorchrunArgs;

HostFacts facts() {
  HostFacts h;
  h.cpu_count = 2;
  h.python = "/usr/bin/python3";
  h.local_host = [](const std::string& host) -> std::string {
    return host == "this-host" ? "" : "is not an address of this machine";
  };
  h.port_free = [](const std::string&, int) -> std::string { return ""; };
  h.slurm_first_host = [] { return std::string("other-host"); };
  return h;
}

Resolved resolve(const TorchrunArgs& a, const HostFacts& h = facts()) {
  return dtrain::cli::run::resolve(a, {"t.py"}, false, 1, false, h);
}

TorchrunArgs two_nodes(const std::string& nnodes = "2") {
  TorchrunArgs a;
  a.nnodes = nnodes;
  a.rdzv_endpoint = "other-host:29400";
  return a;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace run_bounds_test

using run_bounds_test::HostFacts;
using run_bounds_test::Resolved;
using run_bounds_test::TorchrunArgs;


TEST_CASE("node rank: below --nnodes' maximum, refused at once otherwise, naming the rank and the range") {
  TorchrunArgs a = run_bounds_test::two_nodes();
  a.node_rank = "1";
  CHECK(run_bounds_test::resolve(a).error.empty());
  a.node_rank = "7";
  const Resolved r = run_bounds_test::resolve(a);
  CHECK(run_bounds_test::has(r.error, "--node-rank 7 is not a node of --nnodes 2: node ranks run from 0 to 1"));
  a.node_rank = "2";
  CHECK(run_bounds_test::has(run_bounds_test::resolve(a).error, "--node-rank 2 is not a node of --nnodes 2"));
  // MIN:MAX: any rank below MAX.
  a = run_bounds_test::two_nodes("2:4");
  a.node_rank = "3";
  CHECK(run_bounds_test::resolve(a).error.empty());
  a.node_rank = "4";
  CHECK(run_bounds_test::has(run_bounds_test::resolve(a).error, "--node-rank 4 is not a node of --nnodes 2:4: node ranks run from 0 to 3"));
  // Under srun the rank comes from SLURM_NODEID, and the refusal says so.
  HostFacts slurm = run_bounds_test::facts();
  slurm.slurm_node_id = "5";
  slurm.slurm_step_nodes = "2";
  CHECK(run_bounds_test::has(run_bounds_test::resolve(TorchrunArgs{}, slurm).error, "SLURM_NODEID 5 is not a node of --nnodes 2"));
}

TEST_CASE("SLURM_STEP_NUM_NODES: a node count or a refusal naming it, never a silent one-node job") {
  HostFacts slurm = run_bounds_test::facts();
  slurm.slurm_node_id = "1";  // not the launcher's node: the endpoint is the allocation's first host, another
  for (const char* bad : {"abc", "99999999", "0", "-3", "4097", "2x"}) {
    slurm.slurm_step_nodes = bad;
    const Resolved r = run_bounds_test::resolve(TorchrunArgs{}, slurm);
    CAPTURE(bad);
    CHECK(run_bounds_test::has(r.error, std::string("SLURM_STEP_NUM_NODES is '") + bad + "', not a node count from 1 to 4096"));
    CHECK(!r.multi);
  }
  // --nnodes given: the variable is not read.
  slurm.slurm_step_nodes = "abc";
  CHECK(run_bounds_test::resolve(run_bounds_test::two_nodes(), slurm).error.empty());
  slurm.slurm_step_nodes = "1";
  CHECK(run_bounds_test::resolve(TorchrunArgs{}, slurm).error.empty());
  slurm.slurm_step_nodes = "3";
  const Resolved three = run_bounds_test::resolve(TorchrunArgs{}, slurm);
  CHECK(three.error.empty());
  REQUIRE(three.multi);
  CHECK(three.multi->max_nodes == 3);
}

TEST_CASE("--rdzv-conf timeouts: at least the bounds the heartbeats need, the same as the spec keys'") {
  TorchrunArgs a;
  a.rdzv_conf = "read_timeout=0.001";
  CHECK(run_bounds_test::has(run_bounds_test::resolve(a).error, "--rdzv-conf read_timeout (health.node_timeout_s) must be from 2 to 604800 seconds"));
  CHECK(run_bounds_test::has(run_bounds_test::resolve(a).error, "got '0.001'"));
  a.rdzv_conf = "join_timeout=1e-9";
  CHECK(run_bounds_test::has(run_bounds_test::resolve(a).error, "--rdzv-conf join_timeout (nodes.join_timeout_s) must be from 2 to 604800 seconds"));
  a.rdzv_conf = "read_timeout=1.9";
  CHECK(!run_bounds_test::resolve(a).error.empty());
  a.rdzv_conf = "join_timeout=1.9";
  CHECK(!run_bounds_test::resolve(a).error.empty());
  a.rdzv_conf = "read_timeout=2,join_timeout=2";
  const Resolved ok = run_bounds_test::resolve(a);
  CHECK(ok.error.empty());
  CHECK(*ok.node_timeout_s == dtrain::spec::kMinNodeTimeoutS);
  CHECK(*ok.join_timeout_s == dtrain::spec::kMinJoinTimeoutS);
}

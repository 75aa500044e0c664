// The hello carries the node's topology with every field: what the launcher places ranks by.
#include <doctest/doctest.h>

#include "agent/session/wire.h"

TEST_CASE("the hello carries each local rank's GPU, CPUs, NICs and NCCL variables, and the warnings") {
  dtrain::agent::AgentHello hello;
  hello.facts.topology.source = "topo.txt";
  hello.facts.topology.ranks.push_back({.gpu = 3, .bus_id = "0000:18:00.0", .cpu_affinity = "0-47,96-143",
                                        .numa = "0", .nics = {"mlx5_3", "mlx5_2"},
                                        .env = {{"NCCL_IB_HCA", "=mlx5_3"}, {"NCCL_CROSS_NIC", "0"}}});
  hello.facts.topology.warnings = {"GPU0 has no NIC closer than SYS"};
  const auto message = dtrain::agent::wire::to_wire(hello);
  const auto& t = message.hello().facts().topology();
  CHECK(t.source() == "topo.txt");
  REQUIRE(t.ranks_size() == 1);
  CHECK(t.ranks(0).gpu() == 3);
  CHECK(t.ranks(0).bus_id() == "0000:18:00.0");
  CHECK(t.ranks(0).cpu_affinity() == "0-47,96-143");
  CHECK(t.ranks(0).numa() == "0");
  REQUIRE(t.ranks(0).nics_size() == 2);
  CHECK(t.ranks(0).nics(1) == "mlx5_2");
  REQUIRE(t.ranks(0).env_size() == 2);
  CHECK(t.ranks(0).env(1).name() == "NCCL_CROSS_NIC");
  CHECK(t.ranks(0).env(1).value() == "0");
  REQUIRE(t.warnings_size() == 1);
  CHECK(t.warnings(0) == "GPU0 has no NIC closer than SYS");
}

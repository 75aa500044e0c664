// The launcher reads every field of the topology in an agent's hello (a forgotten one would stay at its default).
#include <doctest/doctest.h>

#include "cli/controller/transport/wire.h"

TEST_CASE("a hello's topology arrives with each rank's GPU, CPUs, NICs and NCCL variables, in order") {
  dtrain::v1::AgentMessage message;
  auto* t = message.mutable_hello()->mutable_facts()->mutable_topology();
  t->set_source("live");
  auto* r = t->add_ranks();
  r->set_gpu(5);
  r->set_bus_id("0000:9a:00.0");
  r->set_cpu_affinity("48-95,144-191");
  r->set_numa("1");
  r->add_nics("mlx5_5");
  r->add_nics("mlx5_4");
  auto* e = r->add_env();
  e->set_name("NCCL_IB_HCA");
  e->set_value("=mlx5_5");
  t->add_warnings("mlx5_4 port 1 is DOWN");
  const auto hello = std::get<dtrain::controller::AgentHello>(dtrain::controller::wire::from_wire(message));
  CHECK(hello.topology.source == "live");
  REQUIRE(hello.topology.ranks.size() == 1);
  const auto& rank = hello.topology.ranks[0];
  CHECK(rank.gpu == 5);
  CHECK(rank.bus_id == "0000:9a:00.0");
  CHECK(rank.cpu_affinity == "48-95,144-191");
  CHECK(rank.numa == "1");
  CHECK(rank.nics == std::vector<std::string>{"mlx5_5", "mlx5_4"});
  CHECK(rank.env == std::vector<std::pair<std::string, std::string>>{{"NCCL_IB_HCA", "=mlx5_5"}});
  CHECK(hello.topology.warnings == std::vector<std::string>{"mlx5_4 port 1 is DOWN"});
}

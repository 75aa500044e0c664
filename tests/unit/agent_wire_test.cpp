// The agent's wire layer reads every field of the launcher's commands: a message with each field set comes out
// as the domain value with the same values (a field the conversion forgot would stay at its default).
#include <doctest/doctest.h>

#include "agent/session/wire.h"

namespace wire = dtrain::agent::wire;
namespace v1 = dtrain::v1;
using namespace std::chrono_literals;

TEST_CASE("Configure, StartGroup and Probe arrive with every field") {
  v1::Configure configure;
  configure.set_job_id("job-1");
  configure.set_node_rank(3);
  configure.set_lease_ms(4000);
  configure.set_heartbeat_interval_ms(500);
  configure.set_stop_grace_ms(7000);
  const auto config = wire::from_wire(configure);
  CHECK(config.job_id == "job-1");
  CHECK(config.node_rank == 3);
  CHECK(config.lease == 4000ms);
  CHECK(config.heartbeat_interval == 500ms);
  CHECK(config.stop_grace == 7000ms);

  v1::StartGroup start;
  start.set_round(2);
  start.set_round_token("token");
  auto* w = start.add_workers();
  w->set_rank(5);
  w->set_local_rank(1);
  w->add_argv("python");
  w->add_argv("train.py");
  (*w->mutable_env())["RANK"] = "5";
  (*w->mutable_env())["OMP_NUM_THREADS"] = "4";
  // The group's common variables lie beneath each worker's own.
  (*start.mutable_common_env())["WORLD_SIZE"] = "8";
  (*start.mutable_common_env())["OMP_NUM_THREADS"] = "1";
  w->set_working_dir("/work");
  w->add_cpus(2);
  w->add_cpus(3);
  w->set_log_path("rank_5.log");
  w->set_stream_stdout(true);
  w->set_stream_stderr(true);
  w->set_error_file("rank_5_error.json");
  CHECK_FALSE(wire::from_wire(start).instrument_python);  // a launcher that never set it asks for nothing
  start.set_instrument_python(true);
  const auto group = wire::from_wire(start);
  CHECK(group.round == 2);
  CHECK(group.round_token == "token");
  CHECK(group.instrument_python);
  REQUIRE(group.workers.size() == 1);
  const auto& worker = group.workers[0];
  CHECK(worker.rank == 5);
  CHECK(worker.local_rank == 1);
  CHECK(worker.argv == std::vector<std::string>{"python", "train.py"});
  CHECK(worker.env == std::map<std::string, std::string>{{"OMP_NUM_THREADS", "4"}, {"RANK", "5"}, {"WORLD_SIZE", "8"}});
  CHECK(worker.working_dir == "/work");
  CHECK(worker.cpus == std::vector<unsigned>{2, 3});
  CHECK(worker.log_path == "rank_5.log");
  CHECK(worker.stream_stdout);
  CHECK(worker.stream_stderr);
  CHECK(worker.error_file == "rank_5_error.json");

  v1::Probe probe;
  probe.set_id(9);
  probe.set_node_checks(true);
  probe.set_log_dir("/logs");
  probe.set_checkpoint_dir("/ckpt");
  probe.set_open_port(true);
  probe.add_reach("node1:29400");
  probe.set_reach_timeout_ms(1500);
  const auto request = wire::from_wire(probe);
  CHECK(request.id == 9);
  CHECK(request.node_checks);
  CHECK(request.log_dir == "/logs");
  CHECK(request.checkpoint_dir == "/ckpt");
  CHECK(request.open_port);
  CHECK(request.reach == std::vector<std::string>{"node1:29400"});
  CHECK(request.reach_timeout == 1500ms);
}

TEST_CASE("the hello carries the node's facts, its RAM among them") {
  dtrain::agent::AgentHello hello;
  hello.facts.hostname = "node1";
  hello.facts.gpu_count = 8;
  hello.facts.mem_total_bytes = 64ULL << 30;
  const auto message = wire::to_wire(hello);
  REQUIRE(message.has_hello());
  CHECK(message.hello().facts().hostname() == "node1");
  CHECK(message.hello().facts().gpu_count() == 8);
  CHECK(message.hello().facts().mem_total_bytes() == 64ULL << 30);
}

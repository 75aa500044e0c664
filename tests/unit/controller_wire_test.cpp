// The launcher's wire layer reads every field of an agent's reports: a message with each field set comes out as
// the domain value with the same values (a field the conversion forgot would stay at its default).
#include <doctest/doctest.h>

#include "cli/controller/transport/session_reader.h"
#include "cli/controller/transport/wire.h"

namespace wire = dtrain::controller::wire;
namespace v1 = dtrain::v1;
using namespace dtrain::controller;

TEST_CASE("Hello, WorkerExited, LogLines and ProbeResult arrive with every field") {
  v1::AgentMessage hello_message;
  auto* h = hello_message.mutable_hello();
  h->set_agent_address("node1:29400");
  h->set_slot(4);
  auto* f = h->mutable_facts();
  f->set_hostname("node1");
  f->set_host_id("machine-1");
  f->set_dtrain_version("1.2.3");
  f->add_cpus(0);
  f->add_cpus(1);
  f->add_cpu_numa_node(0);
  f->add_cpu_numa_node(1);
  f->set_gpu_count(8);
  f->set_mem_total_bytes(64ULL << 30);
  auto* i = f->add_interfaces();
  i->set_name("eth0");
  i->set_address("10.0.0.1");
  const auto hello = std::get<AgentHello>(wire::from_wire(hello_message));
  CHECK(hello.hostname == "node1");
  CHECK(hello.host_id == "machine-1");
  CHECK(hello.dtrain_version == "1.2.3");
  CHECK(hello.agent_address == "node1:29400");
  CHECK(hello.cpus == std::vector<unsigned>{0, 1});
  CHECK(hello.cpu_numa == std::vector<int>{0, 1});
  CHECK(hello.gpu_count == 8);
  CHECK(hello.mem_total_bytes == 64ULL << 30);
  REQUIRE(hello.interfaces.size() == 1);
  CHECK(hello.interfaces[0].name == "eth0");
  CHECK(hello.interfaces[0].address == "10.0.0.1");
  CHECK(hello.slot == 4U);
  hello_message.mutable_hello()->clear_slot();
  CHECK_FALSE(std::get<AgentHello>(wire::from_wire(hello_message)).slot.has_value());

  v1::AgentMessage exit_message;
  auto* x = exit_message.mutable_worker_exited();
  x->set_round(2);
  x->set_rank(3);
  x->set_pid(1234);
  x->set_exit_code(1);
  x->set_signal(9);
  x->set_stopped_by_agent(true);
  x->set_runtime_ms(5000);
  x->add_stderr_tail("boom");
  x->set_error_file_json("{}");
  x->set_exit_unix_ms(77);
  x->set_spawn_error("no such file");
  x->set_log_error("disk full");
  x->set_log_bytes_lost(12);
  x->set_log_path("rank_3.log");
  const auto exit = std::get<WorkerExit>(wire::from_wire(exit_message));
  CHECK(exit.round == 2);
  CHECK(exit.rank == 3);
  CHECK(exit.pid == 1234);
  CHECK(exit.exit_code == 1);
  CHECK(exit.signal == 9);
  CHECK(exit.stopped_by_agent);
  CHECK(exit.runtime_ms == 5000);
  CHECK(exit.stderr_tail == std::vector<std::string>{"boom"});
  CHECK(exit.error_file_json == "{}");
  CHECK(exit.exit_unix_ms == 77);
  CHECK(exit.spawn_error == "no such file");
  CHECK(exit.log_error == "disk full");
  CHECK(exit.log_bytes_lost == 12);
  CHECK(exit.log_path == "rank_3.log");

  v1::AgentMessage lines_message;
  lines_message.mutable_log_lines()->set_round(2);
  auto* line = lines_message.mutable_log_lines()->add_lines();
  line->set_rank(1);
  line->set_is_stderr(true);
  line->set_text("hello");
  const auto lines = std::get<LogLines>(wire::from_wire(lines_message));
  CHECK(lines.round == 2);
  REQUIRE(lines.lines.size() == 1);
  CHECK(lines.lines[0].rank == 1);
  CHECK(lines.lines[0].is_stderr);
  CHECK(lines.lines[0].text == "hello");

  v1::AgentMessage probe_message;
  auto* p = probe_message.mutable_probe_result();
  p->set_id(9);
  p->set_node_checks_json("{\"node\":1}");
  p->set_unix_ms(88);
  p->set_open_port(29500);
  auto* r = p->add_reach();
  r->set_address("node2:29400");
  r->set_ok(false);
  r->set_error("connection refused");
  r->set_connect_ms(3);
  p->set_dtrain_version("1.2.3");
  p->set_driver_version("550.1");
  p->set_nccl_version(21903);
  p->add_interfaces("eth0");
  const auto probe = std::get<ProbeResult>(wire::from_wire(probe_message));
  CHECK(probe.id == 9);
  CHECK(probe.node_checks_json == "{\"node\":1}");
  CHECK(probe.unix_ms == 88);
  CHECK(probe.open_port == 29500);
  REQUIRE(probe.reach.size() == 1);
  CHECK(probe.reach[0].address == "node2:29400");
  CHECK_FALSE(probe.reach[0].ok);
  CHECK(probe.reach[0].error == "connection refused");
  CHECK(probe.reach[0].connect_ms == 3);
  CHECK(probe.dtrain_version == "1.2.3");
  CHECK(probe.driver_version == "550.1");
  CHECK(probe.nccl_version == 21903);
  CHECK(probe.interfaces == std::vector<std::string>{"eth0"});
}

TEST_CASE("StartGroup and ProbeRequest go out with every field; what all workers' env shares goes once") {
  const WorkerLaunch first{.rank = 5, .local_rank = 1, .argv = {"python", "train.py"},
                           .env = {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"OMP_NUM_THREADS", "2"}},
                           .working_dir = "/work", .cpus = {2, 3}, .log_path = "rank_5.log", .stream_stdout = true,
                           .stream_stderr = false, .error_file = "err.json"};
  WorkerLaunch second = first, third = first;
  second.rank = 6;
  second.env = {{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"OMP_NUM_THREADS", "4"}};
  third.rank = 7;
  third.env = {{"RANK", "7"}, {"WORLD_SIZE", "8"}};
  const StartGroup start{.round = 2, .round_token = "token", .workers = {first, second, third},
                         .instrument_python = true};
  const auto s = wire::to_wire(Command{start}).start_group();
  CHECK(s.round() == 2);
  CHECK(s.round_token() == "token");
  CHECK(s.instrument_python());
  // Shared by all three: once, for the group. Anything that differs, or that one worker lacks, stays per worker.
  CHECK(s.common_env_size() == 1);
  CHECK(s.common_env().at("WORLD_SIZE") == "8");
  REQUIRE(s.workers_size() == 3);
  CHECK(s.workers(1).env_size() == 2);
  CHECK(s.workers(1).env().at("OMP_NUM_THREADS") == "4");
  CHECK(s.workers(2).env_size() == 1);
  const auto& w = s.workers(0);
  CHECK(w.rank() == 5);
  CHECK(w.local_rank() == 1);
  REQUIRE(w.argv_size() == 2);
  CHECK(w.argv(1) == "train.py");
  CHECK(w.env_size() == 2);
  CHECK(w.env().at("RANK") == "5");
  CHECK(w.working_dir() == "/work");
  REQUIRE(w.cpus_size() == 2);
  CHECK(w.cpus(1) == 3);
  CHECK(w.log_path() == "rank_5.log");
  CHECK(w.stream_stdout());
  CHECK_FALSE(w.stream_stderr());
  CHECK(w.error_file() == "err.json");

  const ProbeRequest request{.id = 9, .node_checks = true, .log_dir = "/logs", .checkpoint_dir = "/ckpt",
                             .open_port = true, .reach = {"node1:29400"}, .reach_timeout_ms = 1500};
  const auto p = wire::to_wire(Command{request}).probe();
  CHECK(p.id() == 9);
  CHECK(p.node_checks());
  CHECK(p.log_dir() == "/logs");
  CHECK(p.checkpoint_dir() == "/ckpt");
  CHECK(p.open_port());
  REQUIRE(p.reach_size() == 1);
  CHECK(p.reach(0) == "node1:29400");
  CHECK(p.reach_timeout_ms() == 1500);
}

TEST_CASE("WorkerHealth and WorkerSample arrive with every field") {
  v1::AgentMessage health_message;
  auto* h = health_message.mutable_worker_health();
  auto* r = h->mutable_report();
  r->set_rank(3);
  r->set_step(4);
  r->set_loss(5.5);
  r->set_tokens_per_s(6.5);
  r->set_rss_bytes(7);
  h->set_unix_ms(8);
  r->set_steps_done(9);
  r->set_step_ms(10.5);
  r->set_data_wait_ms(11.5);
  r->set_compute_ms(12.5);
  r->set_comm_exposed_ms(13.5);
  r->set_optimizer_ms(14.5);
  r->set_device_mem_used_bytes(15);
  r->set_device_mem_total_bytes(16);
  r->set_phase("allreduce bucket 3");
  r->set_mem_params_bytes(17);
  r->set_mem_grads_bytes(18);
  r->set_mem_optim_bytes(19);
  r->set_mem_activations_bytes(20);
  r->set_mem_gathered_peak_bytes(21);
  r->set_comm_bytes(22);
  r->set_loss_scale(23.5);
  r->set_dump_signal(24);
  r->set_samples_per_s(25.5);
  r->set_device_mem_peak_bytes(26);
  r->set_exiting(true);
  const auto health = std::get<WorkerHealth>(wire::from_wire(health_message));
  CHECK(health.rank == 3);
  CHECK(health.step == 4);
  CHECK(health.loss == 5.5);
  CHECK(health.tokens_per_s == 6.5);
  CHECK(health.rss_bytes == 7);
  CHECK(health.unix_ms == 8);
  CHECK(health.steps_done == 9);
  CHECK(health.step_ms == 10.5);
  CHECK(health.data_wait_ms == 11.5);
  CHECK(health.compute_ms == 12.5);
  CHECK(health.comm_exposed_ms == 13.5);
  CHECK(health.optimizer_ms == 14.5);
  CHECK(health.device_mem_used_bytes == 15);
  CHECK(health.device_mem_total_bytes == 16);
  CHECK(health.phase == "allreduce bucket 3");
  CHECK(health.mem_params_bytes == 17);
  CHECK(health.mem_grads_bytes == 18);
  CHECK(health.mem_optim_bytes == 19);
  CHECK(health.mem_activations_bytes == 20);
  CHECK(health.mem_gathered_peak_bytes == 21);
  CHECK(health.comm_bytes == 22);
  CHECK(health.loss_scale == 23.5);
  CHECK(health.dump_signal == 24);
  CHECK(health.samples_per_s == 25.5);
  CHECK(health.device_mem_peak_bytes == 26);
  CHECK(health.exiting);

  v1::AgentMessage sample_message;
  auto* s = sample_message.mutable_worker_sample();
  s->set_round(2);
  s->set_rank(5);
  s->set_cpu_seconds(12.25);
  s->set_state("D");
  s->set_threads(17);
  s->set_unix_ms(99);
  auto sample = std::get<WorkerSample>(wire::from_wire(sample_message));
  CHECK(sample.round == 2);
  CHECK(sample.rank == 5);
  CHECK(sample.cpu_seconds == 12.25);
  CHECK(sample.state == 'D');
  CHECK(sample.threads == 17);
  CHECK(sample.unix_ms == 99);
  // Anything but one letter is not a state the kernel reports.
  s->set_state("DS");
  CHECK(std::get<WorkerSample>(wire::from_wire(sample_message)).state == '?');
  s->clear_state();
  CHECK(std::get<WorkerSample>(wire::from_wire(sample_message)).state == '?');
}

TEST_CASE("a Batch read from a session is one event per message, in order; a batch inside it is only a sign of life") {
  v1::AgentMessage message;
  auto& inner = *message.mutable_batch()->mutable_messages();
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    auto* started = inner.Add()->mutable_worker_started();
    started->set_round(1);
    started->set_rank(rank);
    started->set_pid(100 + rank);
  }
  inner.Add()->mutable_batch()->add_messages()->mutable_group_done()->set_round(1);
  inner.Add()->mutable_group_done()->set_round(1);
  EventQueue events;
  push_report(events, 7, message);
  std::vector<AgentReport> reports;
  while (auto event = events.pop(std::chrono::steady_clock::now())) {
    CHECK(event->node == 7);
    reports.push_back(event->report);
  }
  REQUIRE(reports.size() == 5);
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    REQUIRE(std::holds_alternative<WorkerStarted>(reports[rank]));
    CHECK(std::get<WorkerStarted>(reports[rank]).rank == rank);
    CHECK(std::get<WorkerStarted>(reports[rank]).pid == 100 + rank);
  }
  CHECK(std::holds_alternative<AgentAlive>(reports[3]));
  CHECK(std::holds_alternative<GroupDone>(reports[4]));
}

#include "agent/session/wire.h"

#include <chrono>
#include <variant>

#include "agent/health/report_values.h"
#include "common/grpc/repeated_field.h"

namespace dtrain::agent::wire {
namespace {

using ms = std::chrono::milliseconds;

// Each put() copies one domain value into the message body that carries it.

void put(const WorkerStarted& e, v1::WorkerStarted& out) {
  out.set_round(e.round);
  out.set_rank(e.rank);
  out.set_pid(static_cast<std::uint32_t>(e.pid));
}

void put(const WorkerExited& e, v1::WorkerExited& out) {
  out.set_round(e.round);
  out.set_rank(e.rank);
  out.set_pid(static_cast<std::uint32_t>(e.exit.pid));
  out.set_exit_code(e.exit.exit_code);
  out.set_signal(e.exit.signal);
  out.set_stopped_by_agent(e.exit.stopped);
  out.set_runtime_ms(static_cast<std::uint64_t>(e.exit.runtime.count()));
  append(out.mutable_stderr_tail(), e.exit.stderr_tail);
  out.set_error_file_json(e.error_file_json);
  out.set_log_path(e.log_path);
  out.set_exit_unix_ms(e.exit_unix_ms);
  out.set_spawn_error(e.exit.spawn_error);
  out.set_log_error(e.exit.log_error);
  out.set_log_bytes_lost(e.exit.log_bytes_lost);
}

// One line per message; the outbox merges consecutive ones.
void put(const LogLine& e, v1::LogLines& out) {
  out.set_round(e.round);
  auto* entry = out.add_lines();
  entry->set_rank(e.rank);
  entry->set_is_stderr(e.is_stderr);
  entry->set_text(e.text);
}

void put(const LogWriteFailed& e, v1::LogWriteFailed& out) {
  out.set_round(e.round);
  out.set_rank(e.rank);
  out.set_message(e.message);
}

void put(const GroupDone& e, v1::GroupDone& out) { out.set_round(e.round); }

void put(const GroupStopped& e, v1::GroupStopped& out) {
  out.set_round(e.round);
  out.set_killed(e.killed);
}

void put(const RoundPreparation& prepared, v1::RoundPrepared& out) {
  out.set_round(prepared.round);
  out.set_master_port(prepared.master_port);
  out.set_store_address(prepared.store_address);
}

void put(const node::topo::NodeTopology& topology, v1::NodeTopology& out) {
  out.set_source(topology.source);
  for (const auto& rank : topology.ranks) {
    auto* r = out.add_ranks();
    r->set_gpu(rank.gpu);
    r->set_bus_id(rank.bus_id);
    r->set_cpu_affinity(rank.cpu_affinity);
    r->set_numa(rank.numa);
    append(r->mutable_nics(), rank.nics);
    for (const auto& [name, value] : rank.env) {
      auto* e = r->add_env();
      e->set_name(name);
      e->set_value(value);
    }
  }
  append(out.mutable_warnings(), topology.warnings);
}

void put(const AgentHello& hello, v1::Hello& out) {
  auto* facts = out.mutable_facts();
  facts->set_hostname(hello.facts.hostname);
  facts->set_host_id(hello.facts.host_id);
  append(facts->mutable_addresses(), hello.facts.addresses);
  for (const auto& [name, address] : hello.facts.interfaces) {
    auto* i = facts->add_interfaces();
    i->set_name(name);
    i->set_address(address);
  }
  append(facts->mutable_cpus(), hello.facts.cpus);
  append(facts->mutable_cpu_numa_node(), hello.facts.cpu_numa);
  facts->set_gpu_count(hello.facts.gpu_count);
  facts->set_dtrain_version(hello.dtrain_version);
  facts->set_kernel(hello.facts.kernel);
  facts->set_mem_total_bytes(hello.facts.mem_total_bytes);
  facts->set_cpu_gemm_flops(hello.facts.cpu_gemm_flops);
  facts->set_cpu_gemm_threads(hello.facts.cpu_gemm_threads);
  put(hello.facts.topology, *facts->mutable_topology());
  facts->set_unix_ms(hello.unix_ms);
  out.set_agent_address(hello.agent_address);
  out.set_pid(hello.pid);
  if (hello.slot) out.set_slot(*hello.slot);
}

void put(const ProbeAnswer& answer, v1::ProbeResult& out) {
  out.set_id(answer.id);
  out.set_dtrain_version(answer.dtrain_version);
  out.set_node_checks_json(answer.node_checks_json);
  out.set_driver_version(answer.driver_version);
  out.set_nccl_version(answer.nccl_version);
  append(out.mutable_interfaces(), answer.interfaces);
  out.set_open_port(answer.open_port);
  for (const auto& r : answer.reach) {
    auto* reach = out.add_reach();
    reach->set_address(r.address);
    reach->set_ok(r.ok);
    reach->set_error(r.error);
    reach->set_connect_ms(r.connect_ms);
  }
  out.set_unix_ms(answer.unix_ms);
}

void put(const EvidenceReport& report, v1::Evidence& out) {
  out.set_round(report.round);
  for (const auto& r : report.ranks) {
    auto* rank = out.add_ranks();
    rank->set_rank(r.rank);
    rank->set_stacks_path(r.path);
    append(rank->mutable_top_frames(), r.top_frames);
    rank->set_error(r.error);
    if (r.collectives) {
      auto* c = rank->mutable_collectives();
      c->set_known(true);
      c->set_issued(r.collectives->issued);
      c->set_started(r.collectives->started);
      c->set_finished(r.collectives->finished);
      c->set_pending(r.collectives->pending);
    }
  }
}

void put(const WorkerSample& sample, v1::WorkerSample& out) {
  out.set_round(sample.round);
  out.set_rank(sample.rank);
  out.set_cpu_seconds(sample.process.cpu_seconds);
  out.set_state(std::string(1, sample.process.state));
  out.set_threads(sample.process.threads);
  out.set_unix_ms(sample.unix_ms);
}

// The AgentMessage whose body, reached through `body` (one of its mutable_* accessors), carries `value`.
template <class Value, class Body>
v1::AgentMessage wrap(const Value& value, Body* (v1::AgentMessage::*body)()) {
  v1::AgentMessage message;
  put(value, *(message.*body)());
  return message;
}

// `common`: StartGroup.common_env, beneath the worker's own variables.
WorkerSpec worker_of(const v1::WorkerSpec& w, const google::protobuf::Map<std::string, std::string>& common) {
  WorkerSpec spec{.rank = w.rank(), .local_rank = w.local_rank(), .argv = copy_of(w.argv()),
                  .env = {common.begin(), common.end()}, .working_dir = w.working_dir(), .cpus = copy_of(w.cpus()),
                  .log_path = w.log_path(), .stream_stdout = w.stream_stdout(), .stream_stderr = w.stream_stderr(),
                  .error_file = w.error_file()};
  for (const auto& [name, value] : w.env()) spec.env[name] = value;
  return spec;
}

template <class... Handlers>
struct Overloaded : Handlers... {
  using Handlers::operator()...;
};
// Spelled out for clang 14 (the fuzz build), which does not deduce an aggregate's template arguments yet.
template <class... Handlers>
Overloaded(Handlers...) -> Overloaded<Handlers...>;

}  // namespace

SessionConfig from_wire(const v1::Configure& c) {
  return {.job_id = c.job_id(), .node_rank = c.node_rank(), .lease = ms(c.lease_ms()),
          .heartbeat_interval = ms(c.heartbeat_interval_ms()), .stop_grace = ms(c.stop_grace_ms())};
}

RoundRequest from_wire(const v1::PrepareRound& prepare) { return {prepare.round(), prepare.store_token()}; }

GroupSpec from_wire(const v1::StartGroup& start) {
  return {.round = start.round(),
          .workers = convert_all(start.workers(),
                                 [&](const v1::WorkerSpec& w) { return worker_of(w, start.common_env()); }),
          .round_token = start.round_token(),
          .instrument_python = start.instrument_python()};
}

StopRequest from_wire(const v1::StopGroup& stop) { return {stop.round(), ms(stop.grace_ms())}; }

ProbeRequest from_wire(const v1::Probe& p) {
  return {.id = p.id(), .node_checks = p.node_checks(), .log_dir = p.log_dir(), .checkpoint_dir = p.checkpoint_dir(),
          .open_port = p.open_port(), .reach = copy_of(p.reach()), .reach_timeout = ms(p.reach_timeout_ms())};
}

EvidenceRequest from_wire(const v1::CollectEvidence& collect) {
  return {collect.round(), ms(collect.budget_ms())};
}

v1::AgentMessage to_wire(const EvidenceReport& report) { return wrap(report, &v1::AgentMessage::mutable_evidence); }

v1::AgentMessage to_wire(const WorkerSample& sample) {
  return wrap(sample, &v1::AgentMessage::mutable_worker_sample);
}

v1::AgentMessage to_wire(const AgentHello& hello) { return wrap(hello, &v1::AgentMessage::mutable_hello); }

v1::AgentMessage to_wire(const RoundPreparation& prepared) {
  return wrap(prepared, &v1::AgentMessage::mutable_round_prepared);
}

v1::AgentMessage to_wire(const RunnerEvent& event) {
  using M = v1::AgentMessage;
  return std::visit(Overloaded{
                        [](const WorkerStarted& e) { return wrap(e, &M::mutable_worker_started); },
                        [](const WorkerExited& e) { return wrap(e, &M::mutable_worker_exited); },
                        [](const LogLine& e) { return wrap(e, &M::mutable_log_lines); },
                        [](const LogWriteFailed& e) { return wrap(e, &M::mutable_log_write_failed); },
                        [](const GroupDone& e) { return wrap(e, &M::mutable_group_done); },
                        [](const GroupStopped& e) { return wrap(e, &M::mutable_group_stopped); },
                    },
                    event);
}

v1::AgentMessage to_wire(const ProbeAnswer& answer) { return wrap(answer, &v1::AgentMessage::mutable_probe_result); }

v1::WorkerHealth health_of(const v1::WorkerReport& report) {
  v1::WorkerHealth health;
  *health.mutable_report() = report;
  health.mutable_report()->set_phase(phase_of(report.phase()));
  health.mutable_report()->set_device_name(device_name_of(report.device_name()));
  return health;
}

v1::AgentMessage to_wire(const v1::WorkerHealth& health, std::uint64_t unix_ms) {
  v1::AgentMessage message;
  *message.mutable_worker_health() = health;
  message.mutable_worker_health()->set_unix_ms(unix_ms);
  return message;
}

v1::AgentMessage error_message(const Status& status) {
  v1::AgentMessage message;
  message.mutable_error()->set_message(status.message());
  return message;
}

v1::AgentMessage goodbye_message() {
  v1::AgentMessage message;
  message.mutable_goodbye();
  return message;
}

v1::AgentMessage interrupt_message(int signal) {
  v1::AgentMessage message;
  message.mutable_interrupt()->set_signal(signal);
  return message;
}

}  // namespace dtrain::agent::wire

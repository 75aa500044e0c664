#include "cli/controller/wire.h"

#include <string>

#include "common/version.h"

namespace dtrain::controller::wire {
namespace {

AgentHello hello_of(const v1::Hello& h) {
  const auto& f = h.facts();
  AgentHello out;
  out.hostname = f.hostname();
  out.host_id = f.host_id();
  out.dtrain_version = f.dtrain_version();
  out.agent_address = h.agent_address();
  out.cpus.assign(f.cpus().begin(), f.cpus().end());
  out.cpu_numa.assign(f.cpu_numa_node().begin(), f.cpu_numa_node().end());
  out.gpu_count = f.gpu_count();
  for (const auto& i : f.interfaces()) out.interfaces.push_back({i.name(), i.address()});
  if (h.has_slot()) out.slot = h.slot();
  return out;
}

WorkerExit exit_of(const v1::WorkerExited& x) {
  WorkerExit out;
  out.round = x.round();
  out.rank = x.rank();
  out.pid = x.pid();
  out.exit_code = x.exit_code();
  out.signal = x.signal();
  out.stopped_by_agent = x.stopped_by_agent();
  out.runtime_ms = x.runtime_ms();
  out.stderr_tail.assign(x.stderr_tail().begin(), x.stderr_tail().end());
  out.error_file_json = x.error_file_json();
  out.exit_unix_ms = x.exit_unix_ms();
  out.spawn_error = x.spawn_error();
  out.log_error = x.log_error();
  out.log_bytes_lost = x.log_bytes_lost();
  out.log_path = x.log_path();
  return out;
}

LogLines lines_of(const v1::LogLines& l) {
  LogLines out;
  out.round = l.round();
  out.lines.reserve(static_cast<std::size_t>(l.lines_size()));
  for (const auto& line : l.lines()) out.lines.push_back({line.rank(), line.is_stderr(), line.text()});
  return out;
}

WorkerHealth health_of(const v1::WorkerHealth& h) {
  return {h.rank(), h.step(), h.loss(), h.tokens_per_s(), h.rss_bytes(), h.unix_ms()};
}

ProbeResult probe_of(const v1::ProbeResult& p) {
  ProbeResult out;
  out.id = p.id();
  out.node_checks_json = p.node_checks_json();
  out.unix_ms = p.unix_ms();
  out.open_port = p.open_port();
  for (const auto& r : p.reach()) out.reach.push_back({r.address(), r.ok(), r.error(), r.connect_ms()});
  out.dtrain_version = p.dtrain_version();
  out.driver_version = p.driver_version();
  out.nccl_version = p.nccl_version();
  out.interfaces.assign(p.interfaces().begin(), p.interfaces().end());
  return out;
}

void fill(v1::WorkerSpec& out, const WorkerLaunch& w) {
  out.set_rank(w.rank);
  out.set_local_rank(w.local_rank);
  for (const auto& a : w.argv) out.add_argv(a);
  for (const auto& [k, v] : w.env) (*out.mutable_env())[k] = v;
  out.set_working_dir(w.working_dir);
  for (unsigned c : w.cpus) out.add_cpus(c);
  out.set_log_path(w.log_path);
  out.set_stream_stdout(w.stream_stdout);
  out.set_stream_stderr(w.stream_stderr);
  out.set_error_file(w.error_file);
}

// One overload per command, so that adding a command to the variant without its conversion does not compile.
void fill(v1::LauncherMessage& m, const ConfigureNode& c) {
  auto* out = m.mutable_configure();
  out->set_job_id(c.job_id);
  out->set_node_rank(c.node_rank);
  out->set_lease_ms(c.lease_ms);
  out->set_heartbeat_interval_ms(c.heartbeat_interval_ms);
  out->set_protocol_version(std::string(kProtocolVersion));
  out->set_stop_grace_ms(c.stop_grace_ms);
}

void fill(v1::LauncherMessage& m, const PrepareRound& p) {
  m.mutable_prepare_round()->set_round(p.round);
  m.mutable_prepare_round()->set_store_token(p.store_token);
}

void fill(v1::LauncherMessage& m, const StartGroup& s) {
  auto* out = m.mutable_start_group();
  out->set_round(s.round);
  out->set_round_token(s.round_token);
  for (const auto& w : s.workers) fill(*out->add_workers(), w);
}

void fill(v1::LauncherMessage& m, const StopGroup& s) {
  m.mutable_stop_group()->set_round(s.round);
  m.mutable_stop_group()->set_grace_ms(s.grace_ms);
  m.mutable_stop_group()->set_reason(s.reason);
}

void fill(v1::LauncherMessage& m, const Shutdown& s) { m.mutable_shutdown()->set_reason(s.reason); }

void fill(v1::LauncherMessage& m, const Heartbeat& h) { m.mutable_heartbeat()->set_sent_unix_ms(h.sent_unix_ms); }

void fill(v1::LauncherMessage& m, const ProbeRequest& p) {
  auto* out = m.mutable_probe();
  out->set_id(p.id);
  out->set_node_checks(p.node_checks);
  out->set_log_dir(p.log_dir);
  out->set_checkpoint_dir(p.checkpoint_dir);
  out->set_open_port(p.open_port);
  for (const auto& r : p.reach) out->add_reach(r);
  out->set_reach_timeout_ms(p.reach_timeout_ms);
}

}  // namespace

AgentReport from_wire(const v1::AgentMessage& m) {
  switch (m.body_case()) {
    case v1::AgentMessage::kHello: return hello_of(m.hello());
    case v1::AgentMessage::kRoundPrepared: {
      const auto& p = m.round_prepared();
      return RoundPrepared{p.round(), p.master_port(), p.store_address()};
    }
    case v1::AgentMessage::kWorkerStarted: {
      const auto& s = m.worker_started();
      return WorkerStarted{s.round(), s.rank(), s.pid()};
    }
    case v1::AgentMessage::kWorkerExited: return exit_of(m.worker_exited());
    case v1::AgentMessage::kLogLines: return lines_of(m.log_lines());
    case v1::AgentMessage::kGroupDone: return GroupDone{m.group_done().round()};
    case v1::AgentMessage::kGroupStopped: return GroupStopped{m.group_stopped().round()};
    case v1::AgentMessage::kWorkerHealth: return health_of(m.worker_health());
    case v1::AgentMessage::kLogWriteFailed: {
      const auto& f = m.log_write_failed();
      return LogWriteFailed{f.round(), f.rank(), f.message()};
    }
    case v1::AgentMessage::kError: return AgentError{m.error().message()};
    case v1::AgentMessage::kProbeResult: return probe_of(m.probe_result());
    case v1::AgentMessage::kHeartbeat:
    case v1::AgentMessage::kGoodbye:
    case v1::AgentMessage::BODY_NOT_SET: break;
  }
  return AgentAlive{};
}

v1::LauncherMessage to_wire(const Command& command) {
  v1::LauncherMessage message;
  std::visit([&message](const auto& c) { fill(message, c); }, command);
  return message;
}

}  // namespace dtrain::controller::wire

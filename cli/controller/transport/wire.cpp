#include "cli/controller/transport/wire.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "common/grpc/repeated_field.h"
#include "common/report/report_fields.h"
#include "common/version.h"

namespace dtrain::controller::wire {
namespace {

node::topo::NodeTopology topology_of(const v1::NodeTopology& t) {
  const auto rank_of = [](const v1::RankTopology& r) {
    return node::topo::RankTopology{
        .gpu = r.gpu(), .bus_id = r.bus_id(), .cpu_affinity = r.cpu_affinity(), .numa = r.numa(),
        .nics = copy_of(r.nics()),
        .env = convert_all(r.env(), [](const v1::EnvVar& e) { return std::pair{e.name(), e.value()}; })};
  };
  return {.source = t.source(), .ranks = convert_all(t.ranks(), rank_of), .warnings = copy_of(t.warnings())};
}

AgentHello hello_of(const v1::Hello& h) {
  const auto& f = h.facts();
  return {.hostname = f.hostname(), .host_id = f.host_id(), .dtrain_version = f.dtrain_version(),
          .agent_address = h.agent_address(), .cpus = copy_of(f.cpus()), .cpu_numa = copy_of(f.cpu_numa_node()),
          .gpu_count = f.gpu_count(),
          .interfaces = convert_all(f.interfaces(),
                                    [](const v1::NetInterface& i) { return NetInterface{i.name(), i.address()}; }),
          .mem_total_bytes = f.mem_total_bytes(),
          .cpu_gemm_flops = f.cpu_gemm_flops(),
          .cpu_gemm_threads = f.cpu_gemm_threads(),
          .slot = h.has_slot() ? std::optional<unsigned>(h.slot()) : std::nullopt,
          .topology = topology_of(f.topology())};
}

WorkerExit exit_of(const v1::WorkerExited& x) {
  return {.round = x.round(), .rank = x.rank(), .pid = x.pid(), .exit_code = x.exit_code(), .signal = x.signal(),
          .stopped_by_agent = x.stopped_by_agent(), .runtime_ms = x.runtime_ms(),
          .stderr_tail = copy_of(x.stderr_tail()), .error_file_json = x.error_file_json(),
          .exit_unix_ms = x.exit_unix_ms(), .spawn_error = x.spawn_error(), .log_error = x.log_error(),
          .log_bytes_lost = x.log_bytes_lost(), .log_path = x.log_path()};
}

LogLines lines_of(const v1::LogLines& l) {
  return {.round = l.round(), .lines = convert_all(l.lines(), [](const v1::LogLine& line) {
            return LogLine{line.rank(), line.is_stderr(), line.text()};
          })};
}

WorkerHealth health_of(const v1::WorkerHealth& h) {
  WorkerHealth health;
  static_cast<HealthValues&>(health) = values_of(h.report());
  health.unix_ms = h.unix_ms();
  return health;
}

// The state is one letter; an agent that sent none (or more) gets '?', which no kernel uses.
WorkerSample sample_of(const v1::WorkerSample& s) {
  return {.round = s.round(), .rank = s.rank(), .cpu_seconds = s.cpu_seconds(),
          .state = s.state().size() == 1 ? s.state()[0] : '?', .threads = s.threads(), .unix_ms = s.unix_ms()};
}

Evidence evidence_of(const v1::Evidence& e) {
  return {.round = e.round(), .ranks = convert_all(e.ranks(), [](const v1::RankStacks& r) {
            RankStacks stacks{r.rank(), r.stacks_path(), copy_of(r.top_frames()), r.error(), std::nullopt};
            if (r.collectives().known()) {
              const auto& c = r.collectives();
              stacks.collectives = CollectiveState{c.issued(), c.started(), c.finished(), c.pending()};
            }
            return stacks;
          })};
}

ProbeResult probe_of(const v1::ProbeResult& p) {
  return {.id = p.id(), .node_checks_json = p.node_checks_json(), .unix_ms = p.unix_ms(), .open_port = p.open_port(),
          .reach = convert_all(p.reach(),
                               [](const v1::Reachability& r) {
                                 return node::Reach{r.address(), r.ok(), r.error(), r.connect_ms()};
                               }),
          .dtrain_version = p.dtrain_version(), .driver_version = p.driver_version(),
          .nccl_version = p.nccl_version(), .interfaces = copy_of(p.interfaces())};
}

// The variables every worker of `workers` has with the same value.
std::map<std::string, std::string> shared_env(const std::vector<WorkerLaunch>& workers) {
  std::map<std::string, std::string> shared;
  if (workers.empty()) return shared;
  for (const auto& [name, value] : workers.front().env) {
    const bool everywhere = std::all_of(workers.begin() + 1, workers.end(), [&](const WorkerLaunch& w) {
      const auto it = w.env.find(name);
      return it != w.env.end() && it->second == value;
    });
    if (everywhere) shared.emplace(name, value);
  }
  return shared;
}

// `shared`: what StartGroup.common_env already carries.
void fill(v1::WorkerSpec& out, const WorkerLaunch& w, const std::map<std::string, std::string>& shared) {
  out.set_rank(w.rank);
  out.set_local_rank(w.local_rank);
  append(out.mutable_argv(), w.argv);
  auto& env = *out.mutable_env();
  for (const auto& [name, value] : w.env) {
    if (!shared.count(name)) env[name] = value;
  }
  out.set_working_dir(w.working_dir);
  append(out.mutable_cpus(), w.cpus);
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
  out->set_instrument_python(s.instrument_python);
  out->set_report_window_ms(s.report_window_ms);
  const auto shared = shared_env(s.workers);
  out->mutable_common_env()->insert(shared.begin(), shared.end());
  for (const auto& w : s.workers) fill(*out->add_workers(), w, shared);
}

void fill(v1::LauncherMessage& m, const StopGroup& s) {
  m.mutable_stop_group()->set_round(s.round);
  m.mutable_stop_group()->set_grace_ms(s.grace_ms);
  m.mutable_stop_group()->set_reason(s.reason);
}

void fill(v1::LauncherMessage& m, const Shutdown& s) {
  m.mutable_shutdown()->set_reason(s.reason);
  if (s.job_exit_code) m.mutable_shutdown()->set_job_exit_code(*s.job_exit_code);
}

void fill(v1::LauncherMessage& m, const Heartbeat& h) { m.mutable_heartbeat()->set_sent_unix_ms(h.sent_unix_ms); }

void fill(v1::LauncherMessage& m, const CollectEvidence& c) {
  m.mutable_collect_evidence()->set_round(c.round);
  m.mutable_collect_evidence()->set_budget_ms(c.budget_ms);
}

void fill(v1::LauncherMessage& m, const ProbeRequest& p) {
  auto* out = m.mutable_probe();
  out->set_id(p.id);
  out->set_node_checks(p.node_checks);
  out->set_log_dir(p.log_dir);
  out->set_checkpoint_dir(p.checkpoint_dir);
  out->set_open_port(p.open_port);
  append(out->mutable_reach(), p.reach);
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
    case v1::AgentMessage::kWorkerSample: return sample_of(m.worker_sample());
    case v1::AgentMessage::kLogWriteFailed: {
      const auto& f = m.log_write_failed();
      return LogWriteFailed{f.round(), f.rank(), f.message()};
    }
    case v1::AgentMessage::kError: return AgentError{m.error().message()};
    case v1::AgentMessage::kProbeResult: return probe_of(m.probe_result());
    case v1::AgentMessage::kEvidence: return evidence_of(m.evidence());
    case v1::AgentMessage::kInterrupt: return AgentInterrupt{m.interrupt().signal()};
    case v1::AgentMessage::kHeartbeat:
    case v1::AgentMessage::kGoodbye:
    case v1::AgentMessage::kBatch:   // unpacked by push_report; one inside another is only a sign of life
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

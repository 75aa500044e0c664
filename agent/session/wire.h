#pragma once

// The agent's one wire layer: every conversion between the session's messages (dtrain/v1/session.proto) and the
// agent's domain types (session_types.h, worker_group.h, probe.h) is here, and nowhere else in the agent. The
// session loop (Agent::serve_session) converts at the edge; JobRunner and Prober never see a message. A worker's
// health report stays the worker's own message (report.proto's WorkerReport) on the agent: WorkerHealth carries it.

#include <cstdint>

#include "agent/job/evidence.h"
#include "agent/node/probe/probe.h"
#include "agent/session/session_types.h"
#include "agent/job/worker_sampler.h"
#include "agent/job/worker_group.h"
#include "common/status.h"
#include "dtrain/v1/report.pb.h"
#include "dtrain/v1/session.pb.h"

namespace dtrain::agent::wire {

// launcher -> agent
SessionConfig from_wire(const v1::Configure& configure);
RoundRequest from_wire(const v1::PrepareRound& prepare);
GroupSpec from_wire(const v1::StartGroup& start);
StopRequest from_wire(const v1::StopGroup& stop);
ProbeRequest from_wire(const v1::Probe& probe);
EvidenceRequest from_wire(const v1::CollectEvidence& collect);

// agent -> launcher
v1::AgentMessage to_wire(const AgentHello& hello);
v1::AgentMessage to_wire(const RoundPreparation& prepared);
v1::AgentMessage to_wire(const RunnerEvent& event);
v1::AgentMessage to_wire(const ProbeAnswer& answer);
v1::AgentMessage to_wire(const EvidenceReport& report);
v1::AgentMessage to_wire(const WorkerSample& sample);
// A worker's report as the health message the agent forwards: the report as the worker sent it, its phase and device
// name cut by phase_of and device_name_of (health/report_values.h); unix_ms is to_wire's. Call after
// check_report_values accepted it.
v1::WorkerHealth health_of(const v1::WorkerReport& report);
// A worker's accepted health report, stamped with this agent's clock.
v1::AgentMessage to_wire(const v1::WorkerHealth& health, std::uint64_t unix_ms);
// AgentError: a request of the launcher's that this agent could not carry out.
v1::AgentMessage error_message(const Status& status);
v1::AgentMessage goodbye_message();
v1::AgentMessage interrupt_message(int signal);

}  // namespace dtrain::agent::wire

// The agent's session handler: one launcher's session from its hello to its end (Agent::serve_session and its
// steps), and what each launcher message makes the agent do. The servers that carry sessions in are agent_servers.cpp;
// run() and the agent's life, agent.cpp.

#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/job/evidence.h"
#include "agent/job/worker_sampler.h"
#include "agent/node/probe/probe.h"
#include "agent/security/credentials.h"
#include "agent/session/lease_watch.h"
#include "agent/session/outbox.h"
#include "agent/session/session_stream.h"
#include "agent/session/wire.h"
#include "common/clock.h"
#include "common/version.h"

namespace dtrain::agent {
namespace {

// How long a session's last messages (WorkerExited, GroupStopped, Goodbye) may take to leave once it ends.
constexpr std::chrono::seconds kFinalFlushTimeout{2};

}  // namespace

// What one session holds while it is served. Declared in the order serve_session needs them.
struct Agent::Session {
  Session(SessionStream& stream, const AgentOptions& options)
      : stream(stream),
        outbox(stream, options.default_heartbeat),
        lease(stream, options.default_lease),
        grace(options.default_grace) {}

  SessionStream& stream;
  Outbox outbox;
  LeaseWatch lease;
  std::chrono::milliseconds grace;   // for stops the agent decides itself (Configure's stop_grace)
  Prober prober;
  bool goodbye = false;              // the launcher's Shutdown was answered
  std::string job_id;                // Configure's
  // Each running worker's /proc, every second; its thread pushes to the outbox, so it ends before the outbox goes.
  WorkerSampler sampler{[this](const WorkerSample& sample) { outbox.push(wire::to_wire(sample)); }};
  EvidenceCollector evidence;        // last: its thread, which pushes to the outbox, ends first
};

Status Agent::serve_session(SessionStream& stream, bool* answered) {
  if (Status refused = open_session(stream); !refused.ok()) return refused;
  spdlog::info("session opened by {}", stream.peer());
  Session session(stream, options_);
  {
    std::lock_guard lock(mutex_);
    outbox_ = &session.outbox;
  }
  runner_->set_emit([&session](RunnerEvent event) {
    session.sampler.observe(event);
    session.outbox.push(wire::to_wire(event));
  });
  say_hello(session);
  v1::LauncherMessage message;
  while (!session.goodbye && stream.read(message)) {
    session.lease.heard();
    handle(session, message);
  }
  if (answered) *answered = !session.job_id.empty();
  return close_session(session);
}

Status Agent::open_session(SessionStream& stream) {
  std::lock_guard lock(mutex_);
  if (session_ != nullptr) {
    return {StatusCode::failed_precondition, "this agent already serves a launcher; one job per agent at a time"};
  }
  if (terminated_by_ != 0) return {StatusCode::unavailable, "this agent is shutting down"};
  // The servers take sessions from before the runner is made (start_servers): a launcher that dials that early waits.
  if (reporting_runner_.load(std::memory_order_acquire) == nullptr) {
    return {StatusCode::unavailable, "the agent is still starting"};
  }
  session_ = &stream;
  return {};
}

void Agent::say_hello(Session& session) {
  AgentHello hello{facts_, std::string(version()), unix_ms(), address_, static_cast<std::uint32_t>(::getpid()),
                   options_.slot};
  session.outbox.push(wire::to_wire(hello));
}

void Agent::handle(Session& session, const v1::LauncherMessage& message) {
  switch (message.body_case()) {
    case v1::LauncherMessage::kConfigure:
      configure(session, wire::from_wire(message.configure()));
      break;
    case v1::LauncherMessage::kPrepareRound:
      session.outbox.push(wire::to_wire(runner_->prepare_round(wire::from_wire(message.prepare_round()))));
      break;
    case v1::LauncherMessage::kStartGroup:
      session.outbox.set_report_window(std::chrono::milliseconds(message.start_group().report_window_ms()));
      if (Status status = runner_->start_group(wire::from_wire(message.start_group())); !status.ok()) {
        session.outbox.push(wire::error_message(status));
      } else if (options_.on_group && message.start_group().workers_size() > 0) {
        std::uint32_t first = message.start_group().workers(0).rank();
        for (const auto& w : message.start_group().workers()) first = std::min(first, w.rank());
        options_.on_group(session.job_id, first);
      }
      break;
    case v1::LauncherMessage::kStopGroup: {
      const StopRequest stop = wire::from_wire(message.stop_group());
      runner_->stop_group(stop.round, stop.grace);
      break;
    }
    case v1::LauncherMessage::kShutdown:
      if (message.shutdown().has_job_exit_code()) {
        std::lock_guard lock(mutex_);
        job_exit_code_ = message.shutdown().job_exit_code();
      }
      runner_->stop_and_wait(session.grace, session.grace + kStopSweepMargin);
      session.outbox.push(wire::goodbye_message());
      session.goodbye = true;
      break;
    case v1::LauncherMessage::kProbe: {
      // The disk check looks where this agent would write the job's logs, not at a path the launcher names.
      ProbeRequest probe = wire::from_wire(message.probe());
      probe.log_dir = run_dir();
      session.outbox.push(wire::to_wire(session.prober.answer(probe)));
      break;
    }
    case v1::LauncherMessage::kCollectEvidence: {
      const EvidenceRequest request = wire::from_wire(message.collect_evidence());
      session.evidence.start(request, runner_->stack_targets(request.round),
                             [&session](EvidenceReport report) { session.outbox.push(wire::to_wire(report)); });
      break;
    }
    case v1::LauncherMessage::kHeartbeat:
    case v1::LauncherMessage::BODY_NOT_SET:
      break;
  }
}

void Agent::configure(Session& session, const SessionConfig& config) {
  if (config.lease.count() > 0) session.lease.set_lease(config.lease);
  if (config.heartbeat_interval.count() > 0) session.outbox.set_heartbeat_interval(config.heartbeat_interval);
  session.grace = config.stop_grace;
  spdlog::info("job {}: this is node {}", config.job_id, config.node_rank);
  session.job_id = config.job_id;
  if (Status status = begin_job(config.job_id); !status.ok()) session.outbox.push(wire::error_message(status));
}

Status Agent::close_session(Session& session) {
  Status status;
  if (!session.goodbye) {
    status = session.lease.expired() ? Status{StatusCode::deadline_exceeded, "lease expired"}
                                     : Status{StatusCode::unavailable, "session lost"};
    spdlog::warn("{} ({}): stopping this node's workers", status.message(), session.stream.peer());
  }
  // Whatever ended the session, nothing of the job may outlive it.
  runner_->stop_and_wait(session.grace, session.grace + kStopSweepMargin);
  {
    std::lock_guard lock(mutex_);
    outbox_ = nullptr;
  }
  runner_->set_emit(nullptr);
  session.evidence.wait();
  // The job is over here: its worker certificates open nothing on this agent any more.
  admission_->close();
  session.outbox.flush(kFinalFlushTimeout);
  {
    std::lock_guard lock(mutex_);
    session_ = nullptr;
    // A joined agent whose hello was never answered dials again (JoinClient::run): its session is not over until
    // the joiner says so.
    if (options_.join.empty() || !session.job_id.empty()) session_ended_ = true;
  }
  changed_.notify_all();
  return status;
}

}  // namespace dtrain::agent

#include "tests/tools/fleet_sim_agent.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "agent/session/message_batch.h"
#include "common/clock.h"
#include "common/version.h"

namespace dtrain::fleet_sim {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

// A simulated machine's RAM, as a hello reports it: any plausible value; the launcher only compares ranks' rss to it.
constexpr std::uint64_t kMemTotalBytes = 64ull << 30;
// Simulated worker pids start here, clear of the simulator's own.
constexpr std::uint32_t kFirstPid = 1'000'000;

v1::AgentMessage hello(const AgentOptions& options) {
  v1::AgentMessage message;
  auto* h = message.mutable_hello();
  auto* facts = h->mutable_facts();
  const std::string name = "sim-" + std::to_string(options.index);
  facts->set_hostname(name);
  facts->set_host_id(name);   // one agent per machine, as on a real cluster
  facts->add_addresses("127.0.0.1");
  for (unsigned c = 0; c < options.cpus; ++c) {
    facts->add_cpus(c);
    facts->add_cpu_numa_node(0);
  }
  facts->set_dtrain_version(std::string(version()));
  facts->set_kernel("fleet-sim");
  facts->set_unix_ms(unix_ms());
  auto* lo = facts->add_interfaces();
  lo->set_name("lo");
  lo->set_address("127.0.0.1");
  facts->set_mem_total_bytes(kMemTotalBytes);
  h->set_agent_address("127.0.0.1:" + std::to_string(20000 + options.index % 40000));
  h->set_pid(static_cast<std::uint32_t>(::getpid()));
  return message;
}

}  // namespace

SimAgent::SimAgent(AgentOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(options), channel_(std::move(channel)), stub_(v1::LauncherService::NewStub(channel_)) {}

void SimAgent::start() {
  // Agents dial before their launcher listens: the call waits for the connection instead of failing.
  context_.set_wait_for_ready(true);
  stub_->async()->Join(&context_, this);
  AddHold();
  {
    std::lock_guard lock(mutex_);
    outbox_.push_back(hello(options_));
    write_next();
  }
  StartRead(&incoming_);
  StartCall();
}

bool SimAgent::closed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

int SimAgent::progress() const {
  std::lock_guard lock(mutex_);
  return (times_.configured ? kConfigured : 0) | (times_.started ? kStarted : 0) | (times_.exited ? kExited : 0) |
         (done_ ? kClosed : 0);
}

AgentTimes SimAgent::times() const {
  std::lock_guard lock(mutex_);
  return times_;
}

void SimAgent::send(v1::AgentMessage message) {
  std::lock_guard lock(mutex_);
  if (silent_ || ended_) return;
  const auto now = Clock::now();
  if (outbox_.empty()) oldest_queued_ = now;
  // As an agent's Outbox: a heartbeat goes out only when nothing else did for the interval.
  if (heartbeat_.count() > 0) last_sent_ = now;
  outbox_.push_back(std::move(message));
  write_next();
}

void SimAgent::write_next() {
  if (writing_ || ended_ || outbox_.empty()) return;
  writing_ = true;
  writing_since_ = oldest_queued_.value_or(Clock::now());
  oldest_queued_.reset();
  // As an agent's Outbox does: what waits goes in one write (a group's WorkerStarted, its exits and GroupDone).
  if (options_.batch) {
    writing_message_ = agent::take_batch(outbox_);
  } else {
    writing_message_ = std::move(outbox_.front());
    outbox_.pop_front();
    if (!outbox_.empty()) oldest_queued_ = Clock::now();   // about: one by one, the rest waited as long or less
  }
  writing_message_.set_sent_unix_ms(unix_ms());
  StartWrite(&writing_message_);
}

bool SimAgent::release_if_idle() {
  if (!ended_ || writing_ || !held_) return false;
  held_ = false;
  return true;
}

void SimAgent::OnWriteDone(bool ok) {
  bool cancel, release;
  {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (!ok) ended_ = true;
    times_.max_write_delay =
        std::max(times_.max_write_delay, duration_cast<milliseconds>(Clock::now() - writing_since_));
    cancel = cancel_after_write_ && outbox_.empty();
    write_next();
    release = release_if_idle();
  }
  // Outside the lock: either may run this reactor's other callbacks (OnDone) on this thread.
  if (cancel) context_.TryCancel();
  if (release) RemoveHold();
}

void SimAgent::cancel() {
  bool release;
  {
    std::lock_guard lock(mutex_);
    ended_ = true;
    release = release_if_idle();
  }
  context_.TryCancel();
  if (release) RemoveHold();
}

void SimAgent::OnReadDone(bool ok) {
  if (!ok) {
    bool release;
    {
      std::lock_guard lock(mutex_);
      ended_ = true;
      release = release_if_idle();
    }
    if (release) RemoveHold();
    return;
  }
  handle(incoming_, Clock::now());
  bool reading;
  {
    std::lock_guard lock(mutex_);
    // A stalled agent reads nothing after Configure: what the launcher writes to it backs up.
    reading = !(options_.stall && times_.configured);
  }
  if (reading) StartRead(&incoming_);
}

void SimAgent::OnDone(const grpc::Status& status) {
  std::lock_guard lock(mutex_);
  done_ = true;
  times_.closed = Clock::now();
  times_.end = status.ok() ? "ok" : std::to_string(status.error_code()) + " " + status.error_message();
}

void SimAgent::handle(const v1::LauncherMessage& message, Clock::time_point now) {
  {
    std::lock_guard lock(mutex_);
    if (times_.configured) times_.max_launcher_gap = std::max(times_.max_launcher_gap,
                                                              duration_cast<milliseconds>(now - last_heard_));
    last_heard_ = now;
  }
  v1::AgentMessage reply;
  switch (message.body_case()) {
    case v1::LauncherMessage::kConfigure: {
      std::lock_guard lock(mutex_);
      heartbeat_ = milliseconds(message.configure().heartbeat_interval_ms());
      lease_ = milliseconds(message.configure().lease_ms());
      last_sent_ = now;   // the first heartbeat is late if it does not go out one interval after Configure
      times_.configured = now;
      return;
    }
    case v1::LauncherMessage::kPrepareRound:
      reply.mutable_round_prepared()->set_round(message.prepare_round().round());
      reply.mutable_round_prepared()->set_master_port(29500);
      reply.mutable_round_prepared()->set_store_address("127.0.0.1:29400");
      send(std::move(reply));
      return;
    case v1::LauncherMessage::kStartGroup: on_start_group(message.start_group(), now); return;
    case v1::LauncherMessage::kStopGroup: on_stop_group(message.stop_group()); return;
    case v1::LauncherMessage::kCollectEvidence:
      reply.mutable_evidence()->set_round(message.collect_evidence().round());
      send(std::move(reply));
      return;
    case v1::LauncherMessage::kShutdown: {
      reply.mutable_goodbye();
      send(std::move(reply));
      bool written;
      {
        std::lock_guard lock(mutex_);
        times_.goodbye = true;
        cancel_after_write_ = true;
        written = outbox_.empty() && !writing_;
      }
      if (written) context_.TryCancel();
      return;
    }
    default: return;   // Heartbeat, Probe: only the lease hears them
  }
}

void SimAgent::on_start_group(const v1::StartGroup& start, Clock::time_point now) {
  {
    std::lock_guard lock(mutex_);
    round_ = start.round();
    workers_.clear();
    for (const auto& w : start.workers()) workers_.push_back({w.rank(), false});
    times_.started = now;
    exit_at_ = now + options_.run;
    if (options_.drop != Drop::none) drop_at_ = now + options_.drop_after;
    if (options_.report_hz > 0) {
      report_every_ = std::max<std::chrono::microseconds>(
          std::chrono::microseconds(static_cast<std::int64_t>(1e6 / options_.report_hz)),
          milliseconds(start.report_window_ms()));
      next_report_ = now;
    }
  }
  for (const auto& w : start.workers()) {
    v1::AgentMessage m;
    m.mutable_worker_started()->set_round(start.round());
    m.mutable_worker_started()->set_rank(w.rank());
    m.mutable_worker_started()->set_pid(kFirstPid + w.rank());
    send(std::move(m));
  }
}

void SimAgent::send_reports(Clock::time_point now) {
  v1::AgentMessage out;
  {
    std::lock_guard lock(mutex_);
    if (!times_.started) return;
    const double elapsed_ms = std::chrono::duration<double, std::milli>(now - *times_.started).count();
    const double base_ms = 1000.0 / options_.report_hz;
    for (const auto& w : workers_) {
      if (w.exited) continue;
      const bool straggler = static_cast<int>(w.rank) == options_.straggler_rank;
      const double step_ms = straggler ? 2 * base_ms : base_ms;
      const double data_ms = straggler ? 0.6 * step_ms : 0.05 * base_ms;
      const auto steps = static_cast<std::uint64_t>(elapsed_ms / step_ms);
      auto* r = out.mutable_batch()->add_messages()->mutable_worker_health();
      r->set_unix_ms(unix_ms());
      auto* report = r->mutable_report();
      report->set_rank(w.rank);
      report->set_step(steps);
      report->set_steps_done(steps);
      if (steps > 0) {
        report->set_step_ms(step_ms);
        report->set_data_wait_ms(data_ms);
        report->set_compute_ms(0.7 * base_ms);
        report->set_comm_exposed_ms(0.1 * base_ms);
        report->set_optimizer_ms(step_ms - data_ms - 0.8 * base_ms);
        report->set_loss(4.0 / (1.0 + 0.01 * static_cast<double>(steps)));
        report->set_tokens_per_s(8 * 1024 * 1000.0 / step_ms);
      }
      report->set_rss_bytes(2ull << 30);
      report->set_phase("forward");
    }
    if (out.batch().messages_size() == 0) return;
    times_.reports += static_cast<std::uint64_t>(out.batch().messages_size());
    if (!times_.reported) times_.reported = now;
  }
  send(std::move(out));
}

void SimAgent::on_stop_group(const v1::StopGroup& stop) {
  exit_workers(0, SIGTERM, true);
  v1::AgentMessage m;
  m.mutable_group_stopped()->set_round(stop.round());
  send(std::move(m));
}

void SimAgent::exit_workers(int code, int signal, bool stopped_by_agent) {
  std::vector<v1::AgentMessage> exits;
  std::uint32_t round;
  {
    std::lock_guard lock(mutex_);
    exit_at_.reset();
    next_report_.reset();
    round = round_;
    for (auto& w : workers_) {
      if (w.exited) continue;
      w.exited = true;
      v1::AgentMessage m;
      auto* x = m.mutable_worker_exited();
      x->set_round(round_);
      x->set_rank(w.rank);
      x->set_pid(kFirstPid + w.rank);
      x->set_exit_code(static_cast<int>(w.rank) == options_.fail_rank ? options_.fail_code : code);
      x->set_signal(signal);
      x->set_stopped_by_agent(stopped_by_agent);
      x->set_runtime_ms(static_cast<std::uint64_t>(options_.run.count()));
      x->set_exit_unix_ms(unix_ms());
      exits.push_back(std::move(m));
    }
    if (!exits.empty() && !stopped_by_agent) times_.exited = Clock::now();
  }
  for (auto& m : exits) send(std::move(m));
  if (!exits.empty() && !stopped_by_agent) {
    v1::AgentMessage done;
    done.mutable_group_done()->set_round(round);
    send(std::move(done));
  }
}

void SimAgent::tick(Clock::time_point now) {
  bool heartbeat = false, exit_now = false, lease_lost = false, configured = false, report = false;
  Drop drop = Drop::none;
  {
    std::lock_guard lock(mutex_);
    if (done_ || ended_ || silent_) return;
    if (drop_at_ && now >= *drop_at_) {
      drop = options_.drop;
      drop_at_.reset();
      times_.dropped = now;
    }
    if (times_.configured && heartbeat_.count() > 0 && now >= last_sent_ + heartbeat_) {
      heartbeat = true;
      const auto late = duration_cast<milliseconds>(now - last_sent_) - heartbeat_;
      times_.max_heartbeat_late = std::max(times_.max_heartbeat_late, late);
      last_sent_ = now;
    }
    exit_now = exit_at_ && now >= *exit_at_;
    if (next_report_ && now >= *next_report_ && !exit_now) {
      report = true;
      next_report_ = now + report_every_;
    }
    // A stalled agent reads nothing, so it cannot tell a silent launcher from its own stall.
    if (times_.configured && !options_.stall && !times_.goodbye && lease_.count() > 0) {
      const auto gap = duration_cast<milliseconds>(now - last_heard_);
      times_.max_launcher_gap = std::max(times_.max_launcher_gap, gap);
      lease_lost = gap > lease_ && !times_.lease_lost;
      if (lease_lost) times_.lease_lost = true;
    }
    if (drop == Drop::silent) silent_ = true;
    configured = times_.configured.has_value();
  }
  // A stalled agent reads nothing, so only its connection can tell it that the launcher gave it up (its stream
  // stays open on this side otherwise, and the run would wait for it until the timeout).
  const bool given_up = options_.stall && configured && channel_->GetState(false) != GRPC_CHANNEL_READY;
  if (drop == Drop::cut || lease_lost || given_up) {
    // A real agent whose lease ran out cancels its session and stops its workers.
    cancel();
    return;
  }
  if (drop == Drop::silent) return;
  if (report) send_reports(now);
  if (exit_now) exit_workers(options_.exit_code, 0, false);
  if (heartbeat) {
    v1::AgentMessage m;
    m.mutable_heartbeat()->set_sent_unix_ms(unix_ms());
    send(std::move(m));
  }
}

}  // namespace dtrain::fleet_sim

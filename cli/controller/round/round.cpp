#include "cli/controller/round/round.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "agent/security/x509.h"
#include "cli/controller/diagnose/collective_hang.h"
#include "common/clock.h"
#include "common/report/grid_place.h"

namespace dtrain::controller {

using std::chrono::milliseconds;

Round::Round(RoundSetup setup, RoundFleet& fleet, Interrupts& interrupts, Console& console)
    : setup_(std::move(setup)), fleet_(fleet), interrupts_(interrupts), console_(console),
      health_(setup_.spec->health) {
  for (int node : setup_.nodes) groups_[node] = GroupState::idle;
  in_state_[static_cast<std::size_t>(GroupState::idle)] = groups_.size();
}

GroupState Round::group(int node) const {
  auto it = groups_.find(node);
  return it == groups_.end() ? GroupState::idle : it->second;
}

void Round::move(int node, GroupEvent event) {
  auto it = groups_.find(node);
  if (it == groups_.end()) return;   // not a node of this round
  if (auto next = next_state(it->second, event)) {
    --in_state_[static_cast<std::size_t>(it->second)];
    ++in_state_[static_cast<std::size_t>(*next)];
    it->second = *next;
  }
}

bool Round::all_groups(GroupState state) const { return in_state_[static_cast<std::size_t>(state)] == groups_.size(); }

bool Round::finished() const {
  return interrupts_.interrupted() || root_cause_ || node_failure_ || all_groups(GroupState::done);
}

Round::Outcome Round::run() {
  started_ = fleet_.now();
  if (!prepare()) {
    if (interrupts_.interrupted()) return Outcome::interrupted;
    return Outcome::node_failed;
  }
  plan_workers();
  start_groups();
  wait();
  // The first of these to hold decides, in this order (one event sets at most one of them).
  if (interrupts_.interrupted()) {
    stop_groups();
    return Outcome::interrupted;
  }
  if (root_cause_) {
    stop_groups();
    return Outcome::worker_failed;
  }
  if (node_failure_) {
    stop_groups();
    return Outcome::node_failed;
  }
  return Outcome::success;
}

bool Round::prepare() {
  attempt_dir_ = setup_.job_dir + "/attempt_" + std::to_string(setup_.number);
  if (std::error_code ec; !std::filesystem::create_directories(attempt_dir_, ec) && ec) {
    throw std::runtime_error("cannot create the attempt's log directory " + attempt_dir_ + ": " + ec.message());
  }
  // The round's store token: 32 random bytes from OpenSSL, like every other credential of the cluster.
  token_ = security::x509::random_hex(32);
  const int node0 = setup_.nodes.front();
  fleet_.send(node0, PrepareRound{setup_.number, token_});
  const auto deadline = fleet_.now() + setup_.timeouts->prepare_round;
  fleet_.pump_until([this] { return prepared_ || interrupts_.interrupted() || node_failure_; }, deadline);
  if (prepared_) return true;
  if (!interrupts_.interrupted() && !node_failure_) {
    fleet_.lose(node0, "its agent did not prepare round " + std::to_string(setup_.number) + " within " +
                           std::to_string(setup_.timeouts->prepare_round.count() / 1000) + " s");
  }
  return false;
}

void Round::plan_workers() {
  spec::RoundInfo info;
  info.job_id = setup_.job_id;
  info.restart_count = setup_.number;
  info.master_addr = fleet_.info(setup_.nodes.front()).address;
  info.master_port = prepared_->master_port;
  info.store_address = prepared_->store_address;
  info.store_token = token_;
  info.attempt_dir = attempt_dir_;
  std::vector<spec::NodeInfo> infos;
  for (int id : setup_.nodes) infos.push_back(fleet_.info(id));
  plan_ = spec::make_plan(*setup_.spec, infos, info);
  if (setup_.number == 0) {
    for (const auto& warning : plan_.warnings) console_.note("warning: " + warning);
  }
}

std::chrono::milliseconds report_window(const spec::Spec::Health& health, std::size_t nodes) {
  using std::chrono::milliseconds;
  const milliseconds interval = spec::health_interval(health);
  const milliseconds timeout = spec::duration_ms(health.heartbeat_timeout_s);
  const milliseconds cap = std::max(interval, timeout.count() > 0 ? timeout / 5 : milliseconds(5000));
  const milliseconds spread(static_cast<long long>(nodes) * 1000 / kAgentReportsPerSecond);
  return std::clamp(spread, interval, cap);
}

void Round::start_groups() {
  // What every node's StartGroup shares, made once.
  StartGroup common;
  common.round = setup_.number;
  common.round_token = token_;
  common.instrument_python = setup_.spec->health.instrument == spec::Spec::Health::Instrument::automatic;
  common.report_window_ms =
      static_cast<std::uint32_t>(report_window(setup_.spec->health, setup_.nodes.size()).count());
  std::vector<StartGroup> starts(setup_.nodes.size(), common);
  const auto relative = [this](const std::string& path) {
    // Named inside the job's directory: each agent places them under its own run directory (agent/job/run_dir.h).
    return std::filesystem::path(path).lexically_relative(setup_.job_dir).string();
  };
  // argv and env go to the agents and are not needed here again: moved, not copied (32,768 maps of some thirty
  // variables at 4,096 nodes).
  for (auto& w : plan_.workers) {
    starts[w.node_rank].workers.push_back({.rank = w.rank, .local_rank = w.local_rank, .argv = std::move(w.argv),
                                           .env = std::move(w.env),
                                           .working_dir = w.working_dir, .cpus = w.cpus,
                                           .log_path = relative(w.log_path), .stream_stdout = w.stream_stdout,
                                           .stream_stderr = w.stream_stderr, .error_file = relative(w.error_file)});
    workers_[w.rank] = Worker{};
  }
  // Writing thousands of StartGroups holds the event loop a while (gRPC serialises, encrypts and writes each on this
  // thread): every kStartsBetweenEvents groups, what arrived meanwhile is applied and heartbeats go out.
  for (std::size_t r = 0; r < setup_.nodes.size(); ++r) {
    move(setup_.nodes[r], GroupEvent::start);
    fleet_.send(setup_.nodes[r], std::move(starts[r]));
    if ((r + 1) % kStartsBetweenEvents == 0 && r + 1 < setup_.nodes.size()) {
      fleet_.pump_until([] { return false; }, fleet_.now());
    }
  }
}

void Round::wait() {
  while (!finished()) {
    fleet_.pump_until([this] { return finished() || health_.due_sooner(); }, health_.next_deadline());
    if (finished()) return;
    if (auto failure = health_.check(fleet_.now())) on_health_failure(*failure);
  }
}

// The worker is the round's root cause from now on (a crash it causes in its peers meanwhile is not); then its
// evidence, which the summary shows.
void Round::on_health_failure(const HealthFailure& failure) {
  const auto health = last_health_.find(failure.rank);
  const GridPlace place = health == last_health_.end() ? GridPlace{} : grid_place_of(health->second);
  console_.note("attempt " + std::to_string(setup_.number) + ": " + rank_name(failure.rank, place) + " " +
                failure.what + "; collecting every worker's stacks, then stopping the round");
  Failure f;
  f.rank = failure.rank;
  f.health_failure = failure.what;
  if (failure.rank < plan_.workers.size()) {
    const auto& planned = plan_.workers[failure.rank];
    f.node = planned.node_rank;
    f.host = fleet_.info(setup_.nodes.at(planned.node_rank)).hostname;
    f.log_path = planned.log_path;
  }
  f.exit.round = setup_.number;
  f.exit.rank = failure.rank;
  f.exit.pid = workers_[failure.rank].pid;
  if (health != last_health_.end()) f.last_health = health->second;
  if (auto p = last_sample_.find(failure.rank); p != last_sample_.end()) f.last_sample = p->second;
  f.failed_unix_ms = unix_ms();
  root_cause_ = std::move(f);
  collect_evidence();
  if (auto s = stacks_.find(failure.rank); s != stacks_.end()) root_cause_->stacks = s->second;
  root_cause_->collective_hang = explain_collective_hang(stacks_);
}

void Round::collect_evidence() {
  const CollectEvidence ask{setup_.number, static_cast<std::uint32_t>(setup_.timeouts->evidence_budget.count())};
  for (int node : setup_.nodes) {
    if (fleet_.gone(node)) continue;
    evidence_due_[node] = true;
    fleet_.send(node, ask);
  }
  const auto answered = [this] {
    return interrupts_.interrupted() || std::none_of(evidence_due_.begin(), evidence_due_.end(), [this](const auto& e) {
             return e.second && !fleet_.gone(e.first);
           });
  };
  fleet_.pump_until(answered, fleet_.now() + setup_.timeouts->evidence);
}

void Round::on_evidence(int node, const Evidence& evidence) {
  evidence_due_[node] = false;
  for (const auto& r : evidence.ranks) stacks_[r.rank] = r;
}

void Round::send_stop(milliseconds grace) {
  StopGroup stop;
  stop.round = setup_.number;
  stop.grace_ms = static_cast<std::uint32_t>(grace.count());
  stop.reason = interrupts_.interrupted() ? "interrupted" : "another worker or node failed";
  for (int node : setup_.nodes) {
    move(node, GroupEvent::stop);
    fleet_.send(node, stop);
  }
}

void Round::stop_groups() {
  const milliseconds grace = spec::duration_ms(setup_.spec->stop.grace_s);
  send_stop(grace);
  bool escalated = interrupts_.count() >= 2;
  if (escalated) send_stop(milliseconds(0));
  const auto own_deadline = fleet_.now() + grace + setup_.timeouts->stop_confirm_margin;
  // Stopped and gone are final: the nodes before `unconfirmed` are not looked at again.
  std::size_t unconfirmed = 0;
  const auto confirmed = [this, &unconfirmed] {
    for (; unconfirmed < setup_.nodes.size(); ++unconfirmed) {
      const int node = setup_.nodes[unconfirmed];
      if (group(node) != GroupState::stopped && !fleet_.gone(node)) return false;
    }
    return true;
  };
  while (!confirmed()) {
    // A signal moves the deadline (exit_by) or asks for the stop without grace: look again after each one.
    const int signals = interrupts_.count();
    const bool in_time = fleet_.pump_until([&] { return confirmed() || interrupts_.count() != signals; },
                                           interrupts_.bounded(own_deadline));
    if (!escalated && interrupts_.count() >= 2) {
      escalated = true;
      send_stop(milliseconds(0));
    }
    if (in_time) continue;
    for (int node : setup_.nodes) {
      if (group(node) != GroupState::stopped && !fleet_.gone(node)) {
        fleet_.lose(node, "its agent did not confirm that the workers stopped");
      }
    }
    return;
  }
}

void Round::on_report(int node, const AgentReport& report) {
  if (const auto* p = std::get_if<RoundPrepared>(&report)) {
    if (p->round == setup_.number) prepared_ = *p;
  } else if (const auto* s = std::get_if<WorkerStarted>(&report)) {
    if (s->round == setup_.number) on_worker_started(*s);
  } else if (const auto* x = std::get_if<WorkerExit>(&report)) {
    if (x->round == setup_.number) on_worker_exit(node, *x);
  } else if (const auto* d = std::get_if<GroupDone>(&report)) {
    if (d->round == setup_.number) move(node, GroupEvent::done);
  } else if (const auto* g = std::get_if<GroupStopped>(&report)) {
    if (g->round == setup_.number) move(node, GroupEvent::stopped);
  } else if (const auto* h = std::get_if<WorkerHealth>(&report)) {
    last_health_[h->rank] = *h;
    last_health_[h->rank].points.clear();   // the latest values only; the points are the samples events'
    if (workers_.count(h->rank)) health_.reported(*h, fleet_.now());
  } else if (const auto* sample = std::get_if<WorkerSample>(&report)) {
    if (sample->round == setup_.number) {
      last_sample_[sample->rank] = *sample;
      health_.sampled(sample->rank, sample->state, sample->cpu_seconds, fleet_.now());
    }
  } else if (const auto* e = std::get_if<Evidence>(&report)) {
    if (e->round == setup_.number) on_evidence(node, *e);
  }
}

void Round::on_node_lost(int node, const std::string& text) {
  if (node_failure_) return;
  if (std::find(setup_.nodes.begin(), setup_.nodes.end(), node) != setup_.nodes.end()) node_failure_ = text;
}

void Round::on_worker_started(const WorkerStarted& started) {
  auto& w = workers_[started.rank];
  if (!w.started && ++started_workers_ == workers_.size()) {
    const auto ms = std::chrono::duration_cast<milliseconds>(fleet_.now() - started_).count();
    const std::size_t nodes = setup_.nodes.size();
    console_.note("attempt " + std::to_string(setup_.number) + ": all " + std::to_string(workers_.size()) +
                  " workers started on " + std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") + " in " +
                  std::to_string(ms) + " ms");
  }
  w.started = true;
  w.pid = started.pid;
  health_.started(started.rank, fleet_.now());
}

void Round::on_worker_exit(int node, const WorkerExit& exit) {
  workers_[exit.rank].exited = true;
  health_.exited(exit.rank);
  if (root_cause_ && !root_cause_->health_failure.empty() && root_cause_->rank == exit.rank) {
    // The stop ended the worker that failed its health check: its last output is the best clue left.
    root_cause_->exit = exit;
    if (!exit.log_path.empty()) root_cause_->log_path = exit.log_path;
    return;
  }
  if (!exit.failed()) return;
  Failure f;
  f.rank = exit.rank;
  const bool planned = exit.rank < plan_.workers.size();
  f.node = planned ? plan_.workers[exit.rank].node_rank : static_cast<unsigned>(node);
  f.host = fleet_.info(node).hostname;
  f.exit = exit;
  if (planned) f.log_path = plan_.workers[exit.rank].log_path;
  if (!exit.log_path.empty()) f.log_path = exit.log_path;   // where its agent placed it, on its node
  if (auto h = last_health_.find(exit.rank); h != last_health_.end()) f.last_health = h->second;
  if (auto p = last_sample_.find(exit.rank); p != last_sample_.end()) f.last_sample = p->second;
  f.failed_unix_ms = exit.exit_unix_ms;
  if (!root_cause_) {
    root_cause_ = std::move(f);
  } else {
    other_failures_.push_back(std::move(f));
  }
}

}  // namespace dtrain::controller

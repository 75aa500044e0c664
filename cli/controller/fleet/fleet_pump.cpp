// The Fleet's event pump, its node selection before each round, and its shutdown.

#include <algorithm>

#include "cli/controller/fleet/fleet.h"
#include "common/clock.h"

namespace dtrain::controller {

using std::chrono::milliseconds;

void Fleet::send_heartbeats(Clock::time_point now) {
  if (now < next_heartbeat_) return;
  const Heartbeat beat{unix_ms()};
  for (std::size_t i = 0; i < nodes_.size(); ++i) send(static_cast<int>(i), beat);
  next_heartbeat_ = now + heartbeat_interval_;
}

namespace {

// check_silence's marker through the event queue: signal 0 is no signal (as for kill(2)), and nothing else queues it.
Event drain_marker() {
  Event marker;
  marker.kind = Event::Kind::signal;
  marker.signal = 0;
  return marker;
}

}  // namespace

bool Fleet::take_drain_marker(const Event& event) {
  if (event.kind != Event::Kind::signal || event.signal != 0) return false;
  drain_pending_ = false;
  drained_to_ = drain_queued_at_;
  return true;
}

bool Fleet::check_silence(Clock::time_point now, Clock::time_point& wake) {
  if (shutting_down_) return false;   // the job is ending: a silent node is not lost, it is waited for
  const auto live = live_now();
  // Deadlines are on the live clock, wake-ups on the steady one: a stall in between only makes the fleet look early.
  const auto wake_at = [&](Clock::time_point live_deadline) {
    if (live_deadline != Clock::time_point::max()) wake = std::min(wake, now + (live_deadline - live));
  };
  if (live < next_silence_check_) {
    wake_at(next_silence_check_);
    return false;
  }
  if (drain_pending_) return false;   // the marker is queued: the fleet pops it (and what is before it) at once
  // Read late, judge late: what the launcher has not read yet may be a node's heartbeat (fleet/read_lag.h).
  const auto late = read_lag_.lag(live);
  auto earliest = Clock::time_point::max();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    if (gone(static_cast<int>(i)) || !n.session) continue;
    const auto deadline = n.last_heard + node_timeout_ + late;
    if (live > deadline) {
      if (drained_to_ <= deadline) {
        // What arrived since its deadline may be its message: read it all before judging.
        drain_pending_ = true;
        drain_queued_at_ = live;
        events_.push(drain_marker());
        return false;
      }
      std::string why = "no message from its agent for " + std::to_string(node_timeout_.count()) +
                        " ms (health.node_timeout_s)";
      if (late >= kOrdinaryLag) {
        why += ", and " + std::to_string(late.count()) + " ms more while the launcher read its agents that late";
      }
      lose(static_cast<int>(i), why);
      return true;
    }
    earliest = std::min(earliest, deadline + milliseconds(1));
  }
  next_silence_check_ = earliest;
  wake_at(earliest);
  return false;
}

bool Fleet::next_event(Event& event, Clock::time_point deadline) {
  while (true) {
    const auto time = now();
    send_heartbeats(time);
    listener_.on_tick(time);
    auto wake = std::min({deadline, next_heartbeat_, time + kTickInterval});
    if (check_silence(time, wake)) return false;
    if (auto e = clock_->next(events_, wake)) {
      if (take_drain_marker(*e)) continue;
      event = std::move(*e);
      return true;
    }
    if (now() >= deadline) return false;
  }
}

bool Fleet::pump_until(const std::function<bool()>& done, Clock::time_point deadline) {
  Event event;
  while (!done()) {
    if (next_event(event, deadline)) {
      apply(event);
    } else if (now() >= deadline) {
      return done();
    }
  }
  return true;
}

Result<std::vector<int>> Fleet::select(bool first_round) {
  const int min = spec_.nodes.min_count;
  const auto deadline = now() + provider_->node_wait(first_round, *this);
  // Every node is there, or none is still saying hello and none can arrive any more, or the wait is over.
  const auto enough = [&] {
    if (interrupts_.interrupted() || count(NodeState::ready) >= spec_.nodes.max_count) return true;
    if (waiting_for_hello()) return false;
    return now() >= deadline || !provider_->may_still_join(*this);
  };
  if (!pump_until(enough, deadline) && count(NodeState::ready) < min) {
    // Agents that connected but never said hello are lost.
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].state == NodeState::connecting) lose(static_cast<int>(i), "its agent did not say hello in time");
    }
  }
  if (interrupts_.interrupted()) return {{StatusCode::cancelled, "interrupted"}};
  selected_.clear();
  for (std::size_t i = 0; i < nodes_.size() && static_cast<int>(selected_.size()) < spec_.nodes.max_count; ++i) {
    if (nodes_[i].state == NodeState::ready) selected_.push_back(static_cast<int>(i));
  }
  provider_->order(selected_, *this);
  if (static_cast<int>(selected_.size()) < min) {
    std::string why = "only " + std::to_string(selected_.size()) + " node" + (selected_.size() == 1 ? "" : "s") +
                      " available, nodes.count needs at least " + std::to_string(min) + " (" +
                      std::to_string(min - static_cast<int>(selected_.size())) + " missing)";
    for (const auto& failure : provider_->join_failures()) why += "; " + failure;
    return {{StatusCode::unavailable, why}};
  }
  return {{}, selected_};
}

void Fleet::shutdown(std::optional<int> job_exit_code) {
  shutting_down_ = true;
  provider_->close();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto& n = nodes_[i];
    if (n.session && n.session->open() && !gone(static_cast<int>(i))) n.session->send_last(Shutdown{"job ended", job_exit_code});
  }
  const auto own_deadline = now() + spec::duration_ms(spec_.stop.grace_s) + options_.timeouts.shutdown_margin;
  // A session that never opened (a refused or unreachable agent) has nothing to wait for. A node that ended stays
  // ended, so the nodes before `first_open` are not looked at again (one look per node, not one per event).
  std::size_t first_open = 0;
  const auto ended = [this, &first_open] {
    for (; first_open < nodes_.size(); ++first_open) {
      const auto& n = nodes_[first_open];
      if (!gone(static_cast<int>(first_open)) && n.session && n.session->open()) return false;
    }
    return true;
  };
  while (true) {
    // A signal moves the deadline (the exit deadline): look again after each one.
    const int signals = interrupts_.count();
    if (pump_until([&] { return ended() || interrupts_.count() != signals; }, interrupts_.bounded(own_deadline))) {
      if (ended()) break;
      continue;
    }
    for (auto& n : nodes_) {
      if (n.state != NodeState::closed && n.session) n.session->cancel();
    }
    break;
  }
  for (auto& n : nodes_) {
    if (n.session) n.session->finish();
  }
  // Interrupted: what is left of the exit deadline, and no second grace period for agents that ignore it.
  auto wait = options_.timeouts.agent_exit;
  auto kill_grace = options_.timeouts.agent_kill_grace;
  if (const auto exit_by = interrupts_.exit_by()) {
    wait = std::clamp(std::chrono::duration_cast<milliseconds>(*exit_by - now()), milliseconds(0), wait);
    kill_grace = milliseconds(0);
  }
  provider_->finish(wait, kill_grace, *this);
}

}  // namespace dtrain::controller

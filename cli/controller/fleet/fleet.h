#pragma once

// The Fleet: the launcher's agent sessions. It gets them through its Provider, keeps them alive (heartbeats
// out, the node timeout in), owns each node's state (node_state.h), gives nodes up, selects each round's nodes
// (nodes.count MIN:MAX, join order or slots), pumps every event the launcher reacts to, and ends the sessions.
//
// What the fleet does not consume itself goes to its FleetListener (the Controller): signals, the agents'
// reports, and each node it gave up. One thread (the launcher's) calls everything here.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/controller/fleet/read_lag.h"
#include "cli/controller/providers/provider.h"
#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/round/interrupts.h"
#include "cli/controller/round/node_state.h"
#include "cli/controller/round/round.h"
#include "cli/controller/round/timeouts.h"
#include "cli/controller/session/event_queue.h"
#include "cli/controller/session/node_session.h"
#include "cli/controller/console/console.h"
#include "cli/spec/spec.h"
#include "common/os/loop_lag.h"
#include "common/status.h"

namespace dtrain::controller {

class FleetListener {
 public:
  virtual ~FleetListener() = default;
  virtual void on_signal(int signal) = 0;
  virtual void on_report(int node, const AgentReport& report) = 0;
  virtual void on_node_lost(int node, const std::string& text) = 0;
  // Each turn of the pump, at least once per Fleet::kTickInterval: for work that is due by time.
  virtual void on_tick(std::chrono::steady_clock::time_point) {}
};

// The fleet's time: the steady clock, how long the launcher could not run, and a blocking wait for the next event;
// in tests, a scripted clock that jumps to the deadline when no event is queued, so that minutes of node timeouts
// take no time, and stalls as a test says.
class FleetClock {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~FleetClock() = default;
  virtual Clock::time_point now() const { return Clock::now(); }
  // The wall clock, in ms since the epoch: agents stamp their messages with theirs (ReadLag).
  virtual std::uint64_t unix_ms() const;
  // How long this process could not run so far (stopped, starved: LoopLag); never decreases. Silence is judged on
  // now() - stalled().
  virtual Clock::duration stalled() const {
    if (!lag_) lag_ = std::make_unique<LoopLag>();
    return lag_->stalled();
  }
  // The next event, or nothing once `deadline` passed.
  virtual std::optional<Event> next(EventQueue& events, Clock::time_point deadline) { return events.pop(deadline); }

 private:
  mutable std::unique_ptr<LoopLag> lag_;   // started by the first stalled(), from the launcher's one thread
};

class Fleet final : public RoundFleet, public ProviderFleet {
 public:
  // The longest the pump sleeps without calling FleetListener::on_tick: the job monitor's work is due every second
  // (JobMonitor::kEvaluateInterval), and heartbeats may be further apart than that.
  static constexpr std::chrono::milliseconds kTickInterval{1000};

  // `spec` is the launcher's own (provider slurm fills nodes.count from the allocation).
  Fleet(spec::Spec& spec, FleetOptions options, EventQueue& events, Console& console, Interrupts& interrupts,
        FleetListener& listener);
  ~Fleet() override;

  // The job whose files the agents place (<job_dir> = <logs.dir>/<job_id>).
  void set_job(std::string job_id, std::string job_dir);
  // Gets the agents (Provider::start). Throws std::runtime_error when the job cannot have its nodes.
  void start();
  // Waits (Provider::node_wait) for nodes to say hello and picks this round's: alive ones, in node-rank order,
  // at most nodes.count MAX. unavailable, with why, when fewer than MIN are left; cancelled after a signal.
  Result<std::vector<int>> select(bool first_round);
  // Ends every session (Shutdown, then up to stop.grace_s + Timeouts::shutdown_margin, bounded by the exit
  // deadline), then the agent processes the provider started. `job_exit_code`: how the job ended, told to the agents
  // (a `dtrain run` node exits with it).
  void shutdown(std::optional<int> job_exit_code = std::nullopt);

  // RoundFleet (lose and gone serve providers too).
  Clock::time_point now() const override { return clock_->now(); }
  void send(int node, const Command& command) override;
  void lose(int node, const std::string& why) override;
  bool gone(int node) const override;
  const spec::NodeInfo& info(int node) const override { return nodes_.at(static_cast<std::size_t>(node)).info; }
  bool pump_until(const std::function<bool()>& done, Clock::time_point deadline) override;

  // ProviderFleet.
  const spec::Spec& spec() const override { return spec_; }
  spec::Spec& mutable_spec() override { return spec_; }
  const FleetOptions& options() const override { return options_; }
  const std::string& job_dir() const override { return job_dir_; }
  EventQueue& events() override { return events_; }
  Console& console() override { return console_; }
  LauncherCredentials& credentials() override { return *credentials_; }
  void attach(int id, std::shared_ptr<NodeSession> session) override;
  void leave_out(int id, const std::string& why) override;
  std::size_t size() const override { return nodes_.size(); }
  std::optional<unsigned> slot(int node) const override { return nodes_.at(static_cast<std::size_t>(node)).slot; }
  int node_of_slot(int slot) const override;

  NodeState state(int node) const { return nodes_.at(static_cast<std::size_t>(node)).state; }

 private:
  struct Node {
    std::shared_ptr<NodeSession> session;
    spec::NodeInfo info;
    Clock::time_point last_heard;   // on the live clock (live_now)
    NodeState state = NodeState::connecting;
    std::optional<unsigned> slot;   // ssh/slurm: which host it is (orders node ranks)
  };

  // Grows nodes_ to `size` (new nodes are connecting) and keeps in_state_ counting them.
  void grow(std::size_t size);
  void set_state(Node& node, NodeState state);
  // The steady clock less the time the launcher could not run: node silence is measured on it, so a launcher that
  // was stopped or starved does not blame its nodes for the messages it did not read meanwhile.
  Clock::time_point live_now() const { return clock_->now() - clock_->stalled(); }
  bool next_event(Event& event, Clock::time_point deadline);
  void send_heartbeats(Clock::time_point now);
  // Gives up the first node whose agent has been silent longer than the node timeout; true if it did. Looks at the
  // nodes only once the earliest deadline found by its last look has passed (a node's deadline only moves later),
  // so an event costs O(1) however many nodes there are, and a loss is still found at its deadline. Silence is
  // judged fairly: on the live clock, and only once every event queued by the time a node became overdue has been
  // applied (a drain marker goes through the queue first), so that heartbeats waiting behind a backlog count.
  bool check_silence(Clock::time_point now, Clock::time_point& wake);
  // Whether `event` is the drain marker check_silence queued; if so, what was queued before it has been applied.
  bool take_drain_marker(const Event& event);
  void apply(const Event& event);
  void on_session_closed(int node);
  // Says so when a second's read lag reaches kSayReadLag, and again when it is back under kOrdinaryLag.
  void say_read_lag(std::chrono::milliseconds second);
  void on_report(int node, const AgentReport& report);
  void on_hello(int node, const AgentHello& hello);
  void configure(int node);
  int count(NodeState state) const;
  bool waiting_for_hello() const;
  std::string label(int node) const;

  spec::Spec& spec_;
  FleetOptions options_;
  EventQueue& events_;
  Console& console_;
  Interrupts& interrupts_;
  FleetListener& listener_;
  std::shared_ptr<FleetClock> clock_;
  std::unique_ptr<LauncherCredentials> credentials_;   // transport/: gRPC's credentials stay out of this header
  std::unique_ptr<Provider> provider_;
  std::string job_id_;
  std::string job_dir_;
  std::vector<Node> nodes_;       // every node that ever connected, by id (static/local: spec order; join: join order)
  std::array<int, 4> in_state_{}; // how many of nodes_ are in each NodeState (by its value): count() without a scan
  std::vector<int> selected_;     // the current round's nodes by node rank (ids into nodes_)
  std::chrono::milliseconds node_timeout_;
  std::chrono::milliseconds heartbeat_interval_;
  Clock::time_point next_heartbeat_;
  Clock::time_point next_silence_check_ = Clock::time_point::max();   // live: no node's deadline falls before it
  bool drain_pending_ = false;          // a drain marker is in the queue; nobody is judged until it comes back
  Clock::time_point drain_queued_at_;   // live time the pending marker was queued
  Clock::time_point drained_to_ = Clock::time_point::min();   // live: every event queued before it was applied
  ReadLag read_lag_;                    // how late the launcher reads its agents; silence deadlines move by it
  static constexpr std::chrono::milliseconds kSayReadLag{1000};
  // Below this a read lag is ordinary scheduling: it still moves deadlines, but a loss's message does not mention it,
  // and the console's "reads late" ends when the lag is back under it.
  static constexpr std::chrono::milliseconds kOrdinaryLag{100};
  bool reading_late_ = false;           // the console was told that the launcher reads late
  bool shutting_down_ = false;
};

}  // namespace dtrain::controller

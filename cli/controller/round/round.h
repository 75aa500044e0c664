#pragma once

// One attempt of the job on the nodes the fleet selected:
//
//   prepare   node 0 reserves MASTER_PORT and opens the round's store namespace   (Timeouts::prepare_round)
//   plan      ranks, environment and CPUs per worker (spec::make_plan)
//   start     StartGroup to every node
//   wait      until every group is done (success), a worker fails, a node is lost, or a signal arrives; a worker
//             that fails a health check (health_watch.h) fails like one that exits, after every node was asked
//             for its workers' stacks (CollectEvidence, answered within Timeouts::evidence)
//   stop      on anything but success: StopGroup to every node, wait for each to confirm
//             (stop.grace_s + Timeouts::stop_confirm_margin, bounded by the exit deadline after a signal); a
//             second signal sends a StopGroup without grace; a node that never confirms is lost
//
// Plain C++ over domain reports and commands: everything it does to the nodes goes through RoundFleet, and every
// event reaches it through on_report / on_node_lost, called by whoever pumps the events. So the unit tests drive it
// with a scripted fleet.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/controller/console/console.h"
#include "cli/controller/diagnose/health_watch.h"
#include "cli/controller/round/interrupts.h"
#include "cli/controller/round/node_state.h"
#include "cli/controller/session/session_messages.h"
#include "cli/controller/round/timeouts.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

// How many coalesced report messages a second the launcher is sized for: each costs it about 85 us of CPU plus 14 us
// per rank report inside (BENCHMARKS.md, "Health from 32,768 ranks"), so 2,048 agents reporting once a second take
// about a third of a core.
inline constexpr int kAgentReportsPerSecond = 2048;

// The agents' report window (StartGroup.report_window_ms) for a round of `nodes` nodes: the workers' own interval
// (spec::health_interval), stretched so that the launcher hears at most kAgentReportsPerSecond coalesced messages a
// second (4,096 nodes: 2 s), and never past a fifth of health.heartbeat_timeout_s (5 s when that check is off), so
// that four late windows in a row still do not fail a live worker. What must be seen at once (a rank's first
// report, its first step, its last) goes at once whatever the window (agent/session/outbox.h).
std::chrono::milliseconds report_window(const spec::Spec::Health& health, std::size_t nodes);

// What a round needs from the fleet: the launcher's Fleet, or a scripted one in tests.
class RoundFleet {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~RoundFleet() = default;

  virtual Clock::time_point now() const = 0;
  virtual void send(int node, const Command& command) = 0;
  // Gives the node up with `why`; the round hears of it through Round::on_node_lost.
  virtual void lose(int node, const std::string& why) = 0;
  // True when the node is lost or its session ended: it will answer nothing more.
  virtual bool gone(int node) const = 0;
  virtual const spec::NodeInfo& info(int node) const = 0;
  // Applies events (delivering this round's reports and node losses to it) until `done()` holds, true, or until
  // `deadline` passes, false.
  virtual bool pump_until(const std::function<bool()>& done, Clock::time_point deadline) = 0;
};

struct RoundSetup {
  const spec::Spec* spec = nullptr;
  const Timeouts* timeouts = nullptr;
  std::string job_id;
  std::string job_dir;            // <logs.dir>/<job id>; the attempt's directory is made inside it
  std::uint32_t number = 0;       // 0 for the first attempt, then one per restart
  std::vector<int> nodes;         // fleet ids, by node rank
};

class Round {
 public:
  enum class Outcome { success, worker_failed, node_failed, interrupted };

  // StartGroups written between two turns of the event pump while a round starts: 64 ordinary ones take a few
  // milliseconds, 64 of 256 KiB some tens.
  static constexpr std::size_t kStartsBetweenEvents = 64;

  Round(RoundSetup setup, RoundFleet& fleet, Interrupts& interrupts, Console& console);

  // Runs the attempt to its outcome; every group is stopped unless it succeeded (or was interrupted before any
  // group started). Throws spec::PlanError when the job cannot be planned on these nodes.
  Outcome run();

  // Reports from agents, and node losses, while the round runs. Reports of other rounds are ignored.
  void on_report(int node, const AgentReport& report);
  void on_node_lost(int node, const std::string& text);

  std::uint32_t number() const { return setup_.number; }
  const std::vector<int>& nodes() const { return setup_.nodes; }
  // What node rank `node_rank`'s agent said of its machine.
  const spec::NodeInfo& node_info(std::size_t node_rank) const { return fleet_.info(setup_.nodes.at(node_rank)); }
  std::size_t ranks() const { return plan_.workers.size(); }
  // Empty until the round planned its workers (before it starts them).
  const spec::Plan& plan() const { return plan_; }
  const std::optional<Failure>& root_cause() const { return root_cause_; }
  const std::vector<Failure>& other_failures() const { return other_failures_; }
  // Why the round failed over a node (the first node lost during it).
  const std::optional<std::string>& node_failure() const { return node_failure_; }
  GroupState group(int node) const;
  // Each rank's latest health report (every field, whichever round it came from) and its agent's latest /proc sample
  // of it (this round's), by rank: what `dtrain status` and diagnoses read.
  const std::map<unsigned, WorkerHealth>& last_health() const { return last_health_; }
  const std::map<unsigned, WorkerSample>& last_samples() const { return last_sample_; }

 private:
  struct Worker {
    bool started = false;
    bool exited = false;
    std::uint32_t pid = 0;
  };

  bool prepare();
  void plan_workers();
  void start_groups();
  // Pumps until finished(), waking for each health check that falls due.
  void wait();
  void on_health_failure(const HealthFailure& failure);
  void collect_evidence();
  void on_evidence(int node, const Evidence& evidence);
  void stop_groups();
  void send_stop(std::chrono::milliseconds grace);
  void move(int node, GroupEvent event);
  bool all_groups(GroupState state) const;
  void on_worker_started(const WorkerStarted& started);
  void on_worker_exit(int node, const WorkerExit& exit);
  bool finished() const;

  RoundSetup setup_;
  RoundFleet& fleet_;
  Interrupts& interrupts_;
  Console& console_;
  std::chrono::steady_clock::time_point started_;
  std::string token_;
  std::string attempt_dir_;
  std::optional<RoundPrepared> prepared_;
  spec::Plan plan_;
  std::map<int, GroupState> groups_;            // by fleet id
  std::array<std::size_t, 5> in_state_{};       // how many of groups_ are in each GroupState (by its value)
  std::map<unsigned, Worker> workers_;          // by rank
  std::size_t started_workers_ = 0;
  std::map<unsigned, WorkerHealth> last_health_;   // by rank
  std::map<unsigned, WorkerSample> last_sample_;   // by rank
  HealthWatch health_;
  std::map<int, bool> evidence_due_;               // by fleet id: asked for evidence, not answered yet
  std::map<unsigned, RankStacks> stacks_;          // by rank
  std::optional<Failure> root_cause_;
  std::vector<Failure> other_failures_;
  std::optional<std::string> node_failure_;
};

}  // namespace dtrain::controller

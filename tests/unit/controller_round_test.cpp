// Round driven by a scripted fleet: no agents, no gRPC, no waiting. Each scenario is a script of what the agents
// say (reports, losses, signals) in answer to what the round sends, on a clock that jumps to each deadline when
// nothing is left to say.

#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <deque>
#include <set>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "cli/controller/round/round.h"
#include "cli/spec/spec.h"
#include "temp_dir.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

class ScriptedFleet final : public RoundFleet {
 public:
  struct Step {
    int node = -1;
    std::variant<AgentReport, std::string, int, Clock::duration> what;   // a report, a loss ("why"), a signal, or
                                                                          //   time passing
  };
  // Called for every command the round sends; tests queue the agents' answers from here.
  std::function<void(int node, const Command&)> on_send;
  std::vector<std::pair<int, Command>> sent;
  std::deque<Step> script;
  Round* round = nullptr;
  Interrupts* interrupts = nullptr;
  std::set<int> lost;
  std::vector<std::string> losses;
  Clock::time_point clock = Clock::time_point() + 1h;
  std::vector<dtrain::spec::NodeInfo> infos;

  Clock::time_point now() const override { return clock; }
  void send(int node, const Command& command) override {
    if (lost.count(node)) return;
    sent.emplace_back(node, command);
    if (on_send) on_send(node, command);
  }
  void lose(int node, const std::string& why) override {
    if (!lost.insert(node).second) return;
    losses.push_back("node " + std::to_string(node) + " lost: " + why);
    round->on_node_lost(node, losses.back());
  }
  bool gone(int node) const override { return lost.count(node) > 0; }
  const dtrain::spec::NodeInfo& info(int node) const override { return infos.at(static_cast<std::size_t>(node)); }
  bool pump_until(const std::function<bool()>& done, Clock::time_point deadline) override {
    while (!done()) {
      if (script.empty()) {
        // Nothing more will come: time passes to the deadline (an endless wait here is a bug in the round).
        REQUIRE_MESSAGE(deadline != Clock::time_point::max(), "the round waits forever for something that never comes");
        clock = std::max(clock, deadline);
        return done();
      }
      if (auto* wait = std::get_if<Clock::duration>(&script.front().what)) {
        // Time passes; a deadline within it ends this wait there, with the rest of the time still to pass.
        if (deadline != Clock::time_point::max() && clock + *wait > deadline) {
          *wait -= deadline - clock;
          clock = deadline;
          return done();
        }
        clock += *wait;
        script.pop_front();
        continue;
      }
      Step step = std::move(script.front());
      script.pop_front();
      clock += 1ms;
      if (auto* report = std::get_if<AgentReport>(&step.what)) {
        if (!lost.count(step.node)) round->on_report(step.node, *report);
      } else if (auto* why = std::get_if<std::string>(&step.what)) {
        lose(step.node, *why);
      } else {
        interrupts->on_signal(std::get<int>(step.what), clock);
      }
    }
    return true;
  }

  template <class T>
  std::vector<int> sent_to() const {
    std::vector<int> nodes;
    for (const auto& [node, command] : sent) {
      if (std::holds_alternative<T>(command)) nodes.push_back(node);
    }
    return nodes;
  }
};

dtrain::spec::NodeInfo node_info(int i) {
  dtrain::spec::NodeInfo n;
  n.hostname = "node" + std::to_string(i);
  n.host_id = n.hostname;
  n.address = "10.0.0." + std::to_string(i + 1);
  n.agent_address = n.address + ":29400";
  n.cpus = {0, 1};
  return n;
}

// Two nodes, two workers each (ranks 0-1 on node 0, 2-3 on node 1), stop.grace_s 2; `more_yaml` adds keys.
struct Scenario {
  TempDir dir{"dtrain-round-test"};
  dtrain::spec::Spec spec;
  Timeouts timeouts;
  Interrupts interrupts{2000ms, timeouts.exit_margin};
  std::FILE* console_file = std::tmpfile();
  Console console{console_file, console_file};
  ScriptedFleet fleet;
  Round round;

  // `nodes`: the round's node count (ids 0, 1, ...).
  explicit Scenario(std::uint32_t number = 0, const std::string& more_yaml = "", int nodes = 2)
      : spec(dtrain::spec::load_spec_string("name: job\nnodes: {count: " + std::to_string(nodes) +
                                                "}\nworkers_per_node: 2\ncommand: [train]\nstop: {grace_s: 2}\n" +
                                                more_yaml,
                                            "job.yaml", {})),
        round(RoundSetup{&spec, &timeouts, "job-1", dir.path, number, ids(nodes)}, fleet, interrupts, console) {
    fleet.round = &round;
    fleet.interrupts = &interrupts;
    for (int i = 0; i < nodes; ++i) fleet.infos.push_back(node_info(i));
  }
  static std::vector<int> ids(int nodes) {
    std::vector<int> out(static_cast<std::size_t>(nodes));
    for (int i = 0; i < nodes; ++i) out[static_cast<std::size_t>(i)] = i;
    return out;
  }
  ~Scenario() { std::fclose(console_file); }

  void report(int node, AgentReport report) { fleet.script.push_back({node, std::move(report)}); }
  void pass(RoundFleet::Clock::duration time) { fleet.script.push_back({-1, time}); }
  // Node 0 prepares the round and every worker starts.
  void answer_prepare_and_start() {
    fleet.on_send = [this](int node, const Command& command) {
      if (std::holds_alternative<PrepareRound>(command)) report(node, RoundPrepared{round.number(), 29500, "10.0.0.1:29401"});
      if (const auto* start = std::get_if<StartGroup>(&command)) {
        for (const auto& w : start->workers) report(node, WorkerStarted{round.number(), w.rank, 100 + w.rank});
      }
      if (const auto* stop = std::get_if<StopGroup>(&command); stop && answers_stop(node)) {
        report(node, GroupStopped{stop->round});
      }
    };
  }
  std::function<bool(int)> answers_stop = [](int) { return true; };
};

WorkerExit exited(std::uint32_t round, unsigned rank, int code, int signal = 0, bool stopped = false) {
  WorkerExit x;
  x.round = round;
  x.rank = rank;
  x.exit_code = code;
  x.signal = signal;
  x.stopped_by_agent = stopped;
  return x;
}

}  // namespace

TEST_CASE("round: every worker exits 0 on every node -> success, and no StopGroup is sent") {
  Scenario s;
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (const auto* start = std::get_if<StartGroup>(&command)) {
      for (const auto& w : start->workers) s.report(node, exited(0, w.rank, 0));
      s.report(node, GroupDone{0});
    }
  };
  std::vector<std::uint32_t> windows;
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    if (const auto* start = std::get_if<StartGroup>(&command)) windows.push_back(start->report_window_ms);
    answer(node, command);
  };
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK(windows == std::vector<std::uint32_t>{1000, 1000});   // two nodes: the workers' own interval
  CHECK(s.round.ranks() == 4);
  CHECK(s.fleet.sent_to<PrepareRound>() == std::vector<int>{0});
  CHECK(s.fleet.sent_to<StartGroup>() == std::vector<int>{0, 1});
  CHECK(s.fleet.sent_to<StopGroup>().empty());
  CHECK(s.round.group(0) == GroupState::done);
  CHECK(s.round.group(1) == GroupState::done);
}

TEST_CASE("round: while thousands of StartGroups go out, what arrives meanwhile is applied between them") {
  const int nodes = 2 * static_cast<int>(Round::kStartsBetweenEvents) + 2;
  Scenario s(0, "", nodes);
  s.answer_prepare_and_start();
  bool first_done_before_last_start = false;
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (const auto* start = std::get_if<StartGroup>(&command)) {
      for (const auto& w : start->workers) s.report(node, exited(0, w.rank, 0));
      s.report(node, GroupDone{0});
      // Node 0's group ended (its reports were applied) before the last node's StartGroup was even written.
      if (node == nodes - 1) first_done_before_last_start = s.round.group(0) == GroupState::done;
    }
  };
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK(first_done_before_last_start);
  CHECK(s.fleet.sent_to<StartGroup>().size() == static_cast<std::size_t>(nodes));
}

TEST_CASE("round: a worker exits 3 -> worker_failed with it as root cause; every group is stopped") {
  Scenario s;
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) s.report(1, exited(0, 3, 3));
    // The others are killed by the stop: not failures of their own.
    if (std::holds_alternative<StopGroup>(command) && node == 0) s.report(0, exited(0, 0, 0, SIGTERM, true));
  };
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  REQUIRE(s.round.root_cause());
  CHECK(s.round.root_cause()->rank == 3);
  CHECK(s.round.root_cause()->node == 1);
  CHECK(s.round.root_cause()->host == "node1");
  CHECK(s.round.other_failures().empty());
  CHECK(s.fleet.sent_to<StopGroup>() == std::vector<int>{0, 1});
  CHECK(s.round.group(0) == GroupState::stopped);
  CHECK(s.round.group(1) == GroupState::stopped);
  CHECK(s.fleet.losses.empty());
}

TEST_CASE("round: a node lost while the workers start -> node_failed naming it; the other group is stopped") {
  Scenario s;
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.fleet.script.push_back({1, std::string("no message from its agent for 10000 ms (health.node_timeout_s)")});
      return;   // node 1 starts nothing
    }
    answer(node, command);
  };
  CHECK(s.round.run() == Round::Outcome::node_failed);
  REQUIRE(s.round.node_failure());
  CHECK(s.round.node_failure()->find("node 1 lost: no message from its agent") != std::string::npos);
  CHECK_FALSE(s.round.root_cause());
  // The lost node gets nothing more; the other one is stopped and confirms.
  CHECK(s.fleet.sent_to<StopGroup>() == std::vector<int>{0});
  CHECK(s.round.group(0) == GroupState::stopped);
}

TEST_CASE("round: a second failure during teardown is kept as another failure, not the root cause") {
  Scenario s;
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    if (std::holds_alternative<StartGroup>(command) && node == 0) s.report(0, exited(0, 1, 1));
    if (std::holds_alternative<StopGroup>(command) && node == 1) {
      // Rank 2 crashes by itself while the group is being stopped; rank 3 is stopped.
      s.report(1, exited(0, 2, 0, SIGSEGV));
      s.report(1, exited(0, 3, 0, SIGTERM, true));
    }
    answer(node, command);
  };
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  REQUIRE(s.round.root_cause());
  CHECK(s.round.root_cause()->rank == 1);
  REQUIRE(s.round.other_failures().size() == 1);
  CHECK(s.round.other_failures()[0].rank == 2);
  CHECK(s.round.other_failures()[0].exit.signal == SIGSEGV);
}

TEST_CASE("round: Ctrl-C twice -> interrupted; the stop is sent with grace, then again without") {
  Scenario s;
  s.answers_stop = [](int) { return false; };   // the agents are slow to confirm
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) s.fleet.script.push_back({-1, SIGINT});
    if (const auto* stop = std::get_if<StopGroup>(&command); stop && node == 1) {
      if (stop->grace_ms > 0) {
        s.fleet.script.push_back({-1, SIGINT});
      } else {
        s.report(0, GroupStopped{0});
        s.report(1, GroupStopped{0});
      }
    }
  };
  CHECK(s.round.run() == Round::Outcome::interrupted);
  std::vector<std::uint32_t> graces;
  for (const auto& [node, command] : s.fleet.sent) {
    if (const auto* stop = std::get_if<StopGroup>(&command)) {
      graces.push_back(stop->grace_ms);
      CHECK(stop->reason == "interrupted");
    }
  }
  CHECK(graces == std::vector<std::uint32_t>{2000, 2000, 0, 0});
  CHECK(s.fleet.losses.empty());
  CHECK(s.interrupts.count() == 2);
}

TEST_CASE("round: a node that never answers StopGroup is lost when stop.grace_s + the margin have passed") {
  Scenario s;
  s.answers_stop = [](int node) { return node == 0; };
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 0) s.report(0, exited(0, 0, 2));
  };
  const auto start = s.fleet.now();
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  REQUIRE(s.fleet.losses.size() == 1);
  CHECK(s.fleet.losses[0] == "node 1 lost: its agent did not confirm that the workers stopped");
  // It waited the grace (2 s) plus the confirmation margin, not less and not forever.
  CHECK(s.fleet.now() - start >= 2000ms + s.timeouts.stop_confirm_margin);
  CHECK(s.fleet.now() - start < 2000ms + s.timeouts.stop_confirm_margin + 1s);
}

TEST_CASE("round: node 0 that never prepares the round is lost after Timeouts::prepare_round; nothing starts") {
  Scenario s;
  CHECK(s.round.run() == Round::Outcome::node_failed);
  REQUIRE(s.fleet.losses.size() == 1);
  CHECK(s.fleet.losses[0] == "node 0 lost: its agent did not prepare round 0 within 10 s");
  CHECK(s.fleet.sent_to<StartGroup>().empty());
  CHECK(s.fleet.sent_to<StopGroup>().empty());
}

TEST_CASE("round: reports of another round change nothing") {
  Scenario s(1);
  s.answer_prepare_and_start();
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(1, exited(0, 2, 9));   // a late exit of round 0
      s.report(0, GroupDone{0});
      s.report(1, GroupDone{0});
      s.report(0, GroupDone{1});
      s.report(1, GroupDone{1});
    }
  };
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK_FALSE(s.round.root_cause());
}

// ---------------------------------------------------------------- health checks (health_watch.h)

namespace {

WorkerHealth health(unsigned rank, std::uint64_t step, std::uint64_t steps_done) {
  WorkerHealth h;
  h.rank = rank;
  h.step = step;
  h.steps_done = steps_done;
  return h;
}

// Answers CollectEvidence with a frame per running worker of the node (ranks 0-1 on node 0, 2-3 on node 1), unless
// `answers_evidence` says not; remembers when it was asked; every other command as answer_prepare_and_start. What
// the script still held (heartbeats past the failure) is dropped: the round stops here.
void answer_evidence(Scenario& s, RoundFleet::Clock::time_point& asked_at,
                     std::function<bool(int)> answers_evidence = [](int) { return true; }) {
  s.answer_prepare_and_start();
  s.fleet.on_send = [&s, &asked_at, answers_evidence, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    const auto* ask = std::get_if<CollectEvidence>(&command);
    if (!ask) return;
    asked_at = s.fleet.now();
    if (node == 0) s.fleet.script.clear();
    if (!answers_evidence(node)) return;
    Evidence e{ask->round, {}};
    for (unsigned rank : {2u * node, 2u * node + 1}) {
      e.ranks.push_back({rank, "/runs/job-1/attempt_0/stacks/rank_" + std::to_string(rank) + ".txt",
                         {"#0  0x1 in poll ()", "#1  0x2 in wait_for_peer ()"}, "", std::nullopt});
    }
    s.report(node, e);
  };
}

// Every worker of both nodes exits 0 and both groups are done.
void all_exit(Scenario& s) {
  for (unsigned rank = 0; rank < 4; ++rank) s.report(static_cast<int>(rank / 2), exited(0, rank, 0));
  s.report(0, GroupDone{0});
  s.report(1, GroupDone{0});
}

// `rank` resends the same report every `every` for `total` (a worker alive but without progress).
void heartbeats(Scenario& s, const WorkerHealth& h, std::chrono::seconds every, std::chrono::seconds total) {
  for (auto t = every; t <= total; t += every) {
    s.pass(every);
    s.report(static_cast<int>(h.rank / 2), h);
  }
}

std::size_t index_of_first(const ScriptedFleet& fleet, const std::function<bool(const Command&)>& which) {
  for (std::size_t i = 0; i < fleet.sent.size(); ++i) {
    if (which(fleet.sent[i].second)) return i;
  }
  return fleet.sent.size();
}

}  // namespace

TEST_CASE("round: a worker that reported and then went silent fails after health.heartbeat_timeout_s, stacks first") {
  Scenario s(0, "health: {heartbeat_timeout_s: 30, startup_timeout_s: 0}\n");
  RoundFleet::Clock::time_point asked_at;
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(1, health(2, 5, 1));   // then nothing more from rank 2 (SIGSTOPped, say)
    }
  };
  const auto start = s.fleet.now();
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  REQUIRE(s.round.root_cause());
  const Failure& root = *s.round.root_cause();
  CHECK(root.rank == 2);
  CHECK(root.node == 1);
  CHECK(root.host == "node1");
  CHECK(root.exit.pid == 102);
  CHECK(root.health_failure.find("stopped reporting health 30.0 s ago (health.heartbeat_timeout_s: 30)") == 0);
  CHECK(asked_at - start >= 30s);
  CHECK(asked_at - start < 30s + 20ms);
  // Both nodes were asked before anything was stopped, and the failed rank's frames are kept for the summary.
  CHECK(s.fleet.sent_to<CollectEvidence>() == std::vector<int>{0, 1});
  CHECK(index_of_first(s.fleet, [](const Command& c) { return std::holds_alternative<CollectEvidence>(c); }) <
        index_of_first(s.fleet, [](const Command& c) { return std::holds_alternative<StopGroup>(c); }));
  REQUIRE(root.stacks);
  CHECK(root.stacks->stacks_path == "/runs/job-1/attempt_0/stacks/rank_2.txt");
  CHECK(root.stacks->top_frames.front() == "#0  0x1 in poll ()");
  CHECK(exit_code_of(root) == kHealthCheckExitCode);
  CHECK(s.fleet.sent_to<StopGroup>() == std::vector<int>{0, 1});
}

TEST_CASE("round: slow steps with heartbeats, and workers that never report, are not failed") {
  Scenario s(0, "health: {heartbeat_timeout_s: 5, startup_timeout_s: 60}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(0, health(0, 0, 0));          // rank 0's start-up report
      s.report(0, health(0, 1, 1));          // its first step, then a 100 s step with a heartbeat every 3 s
      heartbeats(s, health(0, 1, 1), 3s, 99s);
      s.report(0, health(0, 2, 2));
      s.report(0, exited(0, 0, 0));          // rank 0 is done; its silence from here on is no failure
      s.pass(20s);
      all_exit(s);                           // ranks 1-3 never reported: unchecked, even past startup_timeout_s
    }
  };
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK(s.fleet.sent_to<CollectEvidence>().empty());
  CHECK_FALSE(s.round.root_cause());
}

TEST_CASE("round: no step progress for health.hang_timeout_s fails the worker, heartbeats or not") {
  Scenario s(0, "health: {heartbeat_timeout_s: 8, hang_timeout_s: 10}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  RoundFleet::Clock::time_point stuck_since{};
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    if (std::holds_alternative<StopGroup>(command) && node == 0) {
      WorkerExit stopped = exited(0, 0, 0, SIGTERM, true);
      stopped.stderr_tail = {"waiting for allreduce"};
      s.report(0, stopped);   // before its node's GroupStopped
    }
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(0, health(0, 40, 0));    // resumed at step 40: a start-up report is no progress
      s.pass(7s);
      s.report(0, health(0, 41, 1));    // its first step; then heartbeats only
      s.report(1, health(1, 41, 1));    // rank 1 keeps stepping
      for (std::uint64_t i = 2; i <= 20; ++i) {
        s.pass(2s);
        s.report(0, health(0, 41, 1));
        s.report(1, health(1, 40 + i, i));
      }
    }
  };
  const auto start = s.fleet.now();
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  stuck_since = start + 7s;
  REQUIRE(s.round.root_cause());
  const Failure& root = *s.round.root_cause();
  CHECK(root.rank == 0);
  CHECK(root.health_failure.find("made no step progress for 10.0 s (stuck at step 41; health.hang_timeout_s: 10)") == 0);
  CHECK(asked_at - stuck_since >= 10s);
  CHECK(asked_at - stuck_since < 10s + 50ms);
  // The stop that ended it leaves its last output in the summary; it stays a health failure.
  CHECK(root.exit.stderr_tail == std::vector<std::string>{"waiting for allreduce"});
  CHECK(describe_failure(root) == root.health_failure);
  CHECK(s.round.other_failures().empty());
}

TEST_CASE("round: a reporting worker with no first step within health.startup_timeout_s fails, naming start-up") {
  Scenario s(0, "health: {heartbeat_timeout_s: 5, startup_timeout_s: 60}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(1, health(3, 0, 0));               // started reporting; stuck in communicator init
      heartbeats(s, health(3, 0, 0), 2s, 80s);
    }
  };
  const auto start = s.fleet.now();
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  REQUIRE(s.round.root_cause());
  CHECK(s.round.root_cause()->rank == 3);
  CHECK(s.round.root_cause()->health_failure.find("made no first step 60.0 s after it started "
                                                  "(health.startup_timeout_s: 60): stuck starting up") == 0);
  CHECK(asked_at - start >= 60s);
  CHECK(asked_at - start < 60s + 20ms);
}

TEST_CASE("round: 0 turns each health check off") {
  Scenario s(0, "health: {heartbeat_timeout_s: 0, hang_timeout_s: 0, startup_timeout_s: 0}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(0, health(0, 0, 0));    // never a first step
      s.report(1, health(1, 3, 1));    // one step, then silence
      s.pass(std::chrono::hours(24));
      all_exit(s);
    }
  };
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK(s.fleet.sent_to<CollectEvidence>().empty());
}

namespace {

// `h` as a process's last report: it finished and is exiting.
WorkerHealth last_report(WorkerHealth h) {
  h.exiting = true;
  return h;
}

// Ranks 0-2 report and then fall silent for an hour before every worker exits 0 (rank 3 never reports): rank 0 after
// two steps, rank 1 before any step (a start-up report only), rank 2 after one step and one more heartbeat, as a
// reporter's thread may send after the last report. `says_exiting`: whether each one's final report says so.
void silent_teardown(Scenario& s, bool says_exiting) {
  const auto final_report = [says_exiting](WorkerHealth h) { return says_exiting ? last_report(h) : h; };
  s.report(0, health(0, 1, 1));
  s.report(0, final_report(health(0, 2, 2)));
  s.report(0, final_report(health(1, 0, 0)));
  s.report(1, health(2, 1, 1));
  s.report(1, final_report(health(2, 1, 1)));
  s.report(1, health(2, 1, 1));
  s.pass(std::chrono::hours(1));
  all_exit(s);
}

}  // namespace

TEST_CASE("round: a rank silent after a report that says quiet is not judged by its heartbeat until a report without "
          "it; without quiet the same silence fails it") {
  for (const bool says_quiet : {true, false}) {
    CAPTURE(says_quiet);
    Scenario s(0, "health: {heartbeat_timeout_s: 30, startup_timeout_s: 600}\n");
    RoundFleet::Clock::time_point asked_at{};
    answer_evidence(s, asked_at);
    s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
      answer(node, command);
      if (std::holds_alternative<StartGroup>(command) && node == 1) {
        WorkerHealth entering = health(2, 0, 0);   // init_process_group, waiting 60 s for a late peer
        entering.quiet = says_quiet;
        s.report(1, entering);
        s.pass(60s);
        s.report(1, health(2, 0, 0));              // it returned; then nothing more (SIGSTOPped, say)
      }
    };
    const auto start = s.fleet.now();
    CHECK(s.round.run() == Round::Outcome::worker_failed);
    REQUIRE(s.round.root_cause());
    CHECK(s.round.root_cause()->rank == 2);
    CHECK(s.round.root_cause()->health_failure.find("stopped reporting health 30.0 s ago") == 0);
    const auto due = says_quiet ? 90s : 30s;   // from the report after the quiet call, or from the first
    CHECK(asked_at - start >= due);
    CHECK(asked_at - start < due + 20ms);
  }
}

TEST_CASE("round: a quiet call that never returns fails the rank by the start-up check") {
  Scenario s(0, "health: {heartbeat_timeout_s: 30, startup_timeout_s: 100}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      WorkerHealth entering = health(3, 0, 0);
      entering.quiet = true;
      s.report(1, entering);
    }
  };
  const auto start = s.fleet.now();
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  REQUIRE(s.round.root_cause());
  CHECK(s.round.root_cause()->rank == 3);
  CHECK(s.round.root_cause()->health_failure.find("made no first step 100.0 s after it started") == 0);
  CHECK(asked_at - start >= 100s);
  CHECK(asked_at - start < 100s + 20ms);
}

TEST_CASE("round: after a report that says exiting, no silence fails the rank (exit_timeout_s 0: teardown unchecked); "
          "without it, the heartbeat check does") {
  for (const bool says_exiting : {true, false}) {
    CAPTURE(says_exiting);
    Scenario s(0, "health: {heartbeat_timeout_s: 3, hang_timeout_s: 5, startup_timeout_s: 10, exit_timeout_s: 0}\n");
    RoundFleet::Clock::time_point asked_at{};
    answer_evidence(s, asked_at);
    s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
      answer(node, command);
      if (std::holds_alternative<StartGroup>(command) && node == 1) silent_teardown(s, says_exiting);
    };
    const auto start = s.fleet.now();
    const Round::Outcome outcome = s.round.run();
    if (says_exiting) {
      // Teardown takes what it takes: heartbeat, hang and start-up checks are all off for the three ranks, and
      // exit_timeout_s 0 turns the teardown check off too.
      CHECK(outcome == Round::Outcome::success);
      CHECK(s.fleet.sent_to<CollectEvidence>().empty());
      CHECK_FALSE(s.round.root_cause());
    } else {
      CHECK(outcome == Round::Outcome::worker_failed);
      REQUIRE(s.round.root_cause());
      CHECK(s.round.root_cause()->health_failure.find("stopped reporting health 3.0 s ago") == 0);
      CHECK(asked_at - start >= 3s);
      CHECK(asked_at - start < 3s + 20ms);
    }
  }
}

TEST_CASE("round: a rank that said it is exiting and has not exited health.exit_timeout_s later fails, stacks first") {
  // Rank 1 sends its last report, one more heartbeat from its reporter's thread 1 s later (it moves nothing), and
  // never exits; every other rank exits 0. With 5 s, and with the default 120 s.
  for (const std::string yaml : {"health: {heartbeat_timeout_s: 3, exit_timeout_s: 5}\n",
                                 "health: {heartbeat_timeout_s: 3}\n"}) {
    CAPTURE(yaml);
    const bool by_default = yaml.find("exit_timeout_s") == std::string::npos;
    const auto timeout = by_default ? 120s : 5s;
    Scenario s(0, yaml);
    RoundFleet::Clock::time_point asked_at{};
    answer_evidence(s, asked_at);
    RoundFleet::Clock::time_point last_report_at{};
    s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
      answer(node, command);
      if (std::holds_alternative<StartGroup>(command) && node == 1) {
        last_report_at = s.fleet.now();   // a few scripted ms before the report itself
        s.report(0, health(1, 4, 4));
        s.report(0, last_report(health(1, 5, 5)));
        s.pass(1s);
        s.report(0, health(1, 5, 5));
        for (unsigned rank : {0u, 2u, 3u}) s.report(static_cast<int>(rank / 2), exited(0, rank, 0));
        s.report(1, GroupDone{0});
        s.pass(std::chrono::hours(1));
      }
    };
    CHECK(s.round.run() == Round::Outcome::worker_failed);
    REQUIRE(s.round.root_cause());
    const Failure& root = *s.round.root_cause();
    CHECK(root.rank == 1);
    CHECK(root.node == 0);
    const std::string seconds = by_default ? "120" : "5";
    CHECK(root.health_failure.find("sent its last report (exiting) " + seconds + ".0 s ago and has not exited: it is "
                                   "stuck in teardown (health.exit_timeout_s: " + seconds + "); its stacks show "
                                   "where") == 0);
    CHECK(describe_failure(root) == root.health_failure);
    CHECK(exit_code_of(root) == kHealthCheckExitCode);
    // Due from the last report, not from the heartbeat after it.
    CHECK(asked_at - last_report_at >= timeout);
    CHECK(asked_at - last_report_at < timeout + 20ms);
    // Its evidence as for a hang: both nodes asked before anything was stopped, its frames kept for the summary.
    CHECK(s.fleet.sent_to<CollectEvidence>() == std::vector<int>{0, 1});
    CHECK(index_of_first(s.fleet, [](const Command& c) { return std::holds_alternative<CollectEvidence>(c); }) <
          index_of_first(s.fleet, [](const Command& c) { return std::holds_alternative<StopGroup>(c); }));
    REQUIRE(root.stacks);
    CHECK(root.stacks->stacks_path == "/runs/job-1/attempt_0/stacks/rank_1.txt");
    REQUIRE(root.last_health);
    CHECK(root.last_health->step == 5);
  }
}

TEST_CASE("round: a rank that said it is exiting and exits within health.exit_timeout_s fails nothing") {
  Scenario s(0, "health: {heartbeat_timeout_s: 3, exit_timeout_s: 5}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      for (unsigned rank = 0; rank < 4; ++rank) s.report(static_cast<int>(rank / 2), last_report(health(rank, 7, 7)));
      s.pass(4900ms);   // a silent teardown past heartbeat_timeout_s, within exit_timeout_s
      all_exit(s);
    }
  };
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK(s.fleet.sent_to<CollectEvidence>().empty());
  CHECK_FALSE(s.round.root_cause());
}

TEST_CASE("round: a rank that said it is exiting is still judged by its exit: a non-zero code fails the round") {
  Scenario s(0, "health: {heartbeat_timeout_s: 3}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at);
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    if (std::holds_alternative<StopGroup>(command)) {
      for (unsigned rank : {2u * node, 2u * node + 1}) {
        if (rank != 1) s.report(node, exited(0, rank, 0, SIGTERM, true));
      }
    }
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) {
      s.report(0, health(1, 4, 4));
      s.report(0, last_report(health(1, 5, 5)));
      s.pass(10s);                         // its teardown, silent, past the heartbeat timeout
      s.report(0, exited(0, 1, 134));      // and then it dies of it (an abort in a destructor)
    }
  };
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  CHECK(s.fleet.sent_to<CollectEvidence>().empty());   // no health check failed it: its exit did
  REQUIRE(s.round.root_cause());
  const Failure& root = *s.round.root_cause();
  CHECK(root.rank == 1);
  CHECK(root.health_failure.empty());
  CHECK(root.exit.exit_code == 134);
  CHECK(exit_code_of(root) == 134);
  REQUIRE(root.last_health);
  CHECK(root.last_health->step == 5);
  CHECK(root.last_health->exiting);
}

TEST_CASE("round: a node that never sends its evidence holds the stop for Timeouts::evidence, no longer") {
  Scenario s(0, "health: {heartbeat_timeout_s: 5}\n");
  RoundFleet::Clock::time_point asked_at{};
  answer_evidence(s, asked_at, [](int node) { return node == 0; });
  RoundFleet::Clock::time_point stop_at{};
  s.fleet.on_send = [&, answer = s.fleet.on_send](int node, const Command& command) {
    answer(node, command);
    if (std::holds_alternative<StartGroup>(command) && node == 1) s.report(0, health(1, 1, 1));
    if (std::holds_alternative<StopGroup>(command) && node == 0) stop_at = s.fleet.now();
  };
  CHECK(s.round.run() == Round::Outcome::worker_failed);
  CHECK(stop_at - asked_at >= s.timeouts.evidence);
  CHECK(stop_at - asked_at < s.timeouts.evidence + 20ms);
  REQUIRE(s.round.root_cause());
  CHECK(s.round.root_cause()->rank == 1);
  REQUIRE(s.round.root_cause()->stacks);   // node 0's answer came
  CHECK(s.fleet.losses.empty());
}

TEST_CASE("round: the agents' report window is the workers' interval, stretched with the fleet, capped") {
  using namespace std::chrono_literals;
  dtrain::spec::Spec::Health h;   // heartbeat_timeout_s 30: the workers report every second
  CHECK(report_window(h, 2) == 1000ms);
  CHECK(report_window(h, 2048) == 1000ms);
  CHECK(report_window(h, 4096) == 2000ms);
  CHECK(report_window(h, 10000) == 4882ms);
  CHECK(report_window(h, 32768) == 6000ms);   // a fifth of heartbeat_timeout_s
  h.heartbeat_timeout_s = 2;                  // the workers report every 400 ms, and windows stay at that
  CHECK(report_window(h, 4096) == 400ms);
  h.heartbeat_timeout_s = 0;                  // no heartbeat check: 1 s, at most 5 s
  CHECK(report_window(h, 4096) == 2000ms);
  CHECK(report_window(h, 32768) == 5000ms);
}

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

#include "cli/controller/round.h"
#include "cli/spec/spec.h"
#include "temp_dir.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

class ScriptedFleet final : public RoundFleet {
 public:
  struct Step {
    int node = -1;
    std::variant<AgentReport, std::string, int> what;   // a report, a loss ("why"), or a signal
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

// Two nodes, two workers each (ranks 0-1 on node 0, 2-3 on node 1), stop.grace_s 2.
struct Scenario {
  TempDir dir{"dtrain-round-test"};
  dtrain::spec::Spec spec = dtrain::spec::load_spec_string(
      "name: job\nnodes: {count: 2}\nworkers_per_node: 2\ncommand: [train]\nstop: {grace_s: 2}\n", "job.yaml", {});
  Timeouts timeouts;
  Interrupts interrupts{2000ms, timeouts.exit_margin};
  std::FILE* console_file = std::tmpfile();
  Console console{console_file, console_file};
  ScriptedFleet fleet;
  Round round;

  explicit Scenario(std::uint32_t number = 0)
      : round(RoundSetup{&spec, &timeouts, "job-1", dir.path, number, {0, 1}}, fleet, interrupts, console) {
    fleet.round = &round;
    fleet.interrupts = &interrupts;
    fleet.infos = {node_info(0), node_info(1)};
  }
  ~Scenario() { std::fclose(console_file); }

  void report(int node, AgentReport report) { fleet.script.push_back({node, std::move(report)}); }
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
  CHECK(s.round.run() == Round::Outcome::success);
  CHECK(s.round.ranks() == 4);
  CHECK(s.fleet.sent_to<PrepareRound>() == std::vector<int>{0});
  CHECK(s.fleet.sent_to<StartGroup>() == std::vector<int>{0, 1});
  CHECK(s.fleet.sent_to<StopGroup>().empty());
  CHECK(s.round.group(0) == GroupState::done);
  CHECK(s.round.group(1) == GroupState::done);
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

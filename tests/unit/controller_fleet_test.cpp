// The Fleet with scripted sessions, provider and clock: which nodes a round gets (join order, slots, nodes.count
// MIN:MAX), and when a node is given up. The clock jumps to each deadline when no event is queued, so minutes of
// join and node timeouts take no time. Silence is judged fairly: a launcher that could not run (a scripted stall)
// does not blame its nodes for that time, heartbeats queued behind a backlog count before anyone is judged, and a
// node that really is silent is still given up at its deadline.

#include <doctest/doctest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/controller/fleet/fleet.h"
#include "cli/controller/providers/remote_provider.h"
#include "cli/spec/spec.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

// Time moves only when the test moves it or the queue is empty (then to the fleet's deadline); stalls as scripted.
class ScriptedClock final : public FleetClock {
 public:
  Clock::time_point time = Clock::time_point() + 1h;
  Clock::duration stall{0};
  Clock::time_point now() const override { return time; }
  Clock::duration stalled() const override { return stall; }
  std::optional<Event> next(EventQueue& events, Clock::time_point deadline) override {
    if (auto event = events.pop(Clock::now())) return event;
    if (deadline == Clock::time_point::max()) throw std::logic_error("the fleet waits forever for an empty queue");
    time = std::max(time, deadline);
    return std::nullopt;
  }
};

class FakeSession final : public NodeSession {
 public:
  std::vector<Command> sent;
  bool cancelled = false;
  bool finished = false;
  bool send(const Command& command) override {
    sent.push_back(command);
    return true;
  }
  bool send_last(const Command& command) override { return send(command); }
  dtrain::Status finish() override {
    finished = true;
    return {};
  }
  void cancel() override { cancelled = true; }
  std::string address() const override { return "10.0.0.9:29400"; }
  bool open() const override { return !finished && !cancelled; }
};

// Attaches `sessions` at start, in that order (the join order); everything else as provider join.
class AttachingProvider : public Provider {
 public:
  explicit AttachingProvider(std::vector<std::shared_ptr<FakeSession>> sessions) : sessions_(std::move(sessions)) {}
  void start(ProviderFleet& fleet) override {
    for (std::size_t i = 0; i < sessions_.size(); ++i) fleet.attach(static_cast<int>(i), sessions_[i]);
  }
  std::chrono::milliseconds node_wait(bool, const ProviderFleet& fleet) const override {
    return dtrain::spec::duration_ms(fleet.spec().nodes.join_timeout_s);
  }
  bool may_still_join(const ProviderFleet&) const override { return true; }

 private:
  std::vector<std::shared_ptr<FakeSession>> sessions_;
};

// ssh/slurm's strategy for node ranks (RemoteProvider::order), without starting any process.
class SlotProvider final : public RemoteProvider {
 public:
  explicit SlotProvider(std::vector<std::shared_ptr<FakeSession>> sessions) : attaching_(std::move(sessions)) {}
  void start(ProviderFleet& fleet) override { attaching_.start(fleet); }
  bool may_still_join(const ProviderFleet&) const override { return true; }

 protected:
  int agent_count(ProviderFleet&) const override { return 0; }
  std::vector<std::vector<std::string>> commands(const ProviderFleet&, int, const RemoteAgentOptions&) const override {
    return {};
  }
  std::string how() const override { return "in a test"; }
  std::string who(const ProviderFleet&, int slot) const override { return "slot " + std::to_string(slot); }
  int node_of_process(const ProviderFleet& fleet, int slot) const override { return fleet.node_of_slot(slot); }

 private:
  AttachingProvider attaching_;
};

struct Listener final : FleetListener {
  std::vector<std::string> lost;
  int reports = 0;
  std::vector<std::chrono::steady_clock::time_point> ticks;
  void on_tick(std::chrono::steady_clock::time_point now) override { ticks.push_back(now); }
  void on_signal(int signal) override { CHECK_MESSAGE(signal != 0, "the drain marker reached the listener"); }
  void on_report(int, const AgentReport&) override { ++reports; }
  void on_node_lost(int, const std::string& text) override { lost.push_back(text); }
};

struct World {
  dtrain::spec::Spec spec;
  std::vector<std::shared_ptr<FakeSession>> sessions;
  std::shared_ptr<ScriptedClock> clock = std::make_shared<ScriptedClock>();
  EventQueue events;
  std::FILE* console_file = std::tmpfile();
  Console console{console_file, console_file};
  Interrupts interrupts{2000ms, 600ms};
  Listener listener;
  std::unique_ptr<Fleet> fleet;

  // `more_yaml`: other keys of the spec, e.g. "health: {node_timeout_s: 120}\n".
  World(const std::string& nodes_yaml, int sessions_count, bool by_slot = false, const std::string& more_yaml = "")
      : spec(dtrain::spec::load_spec_string("name: job\nnodes: " + nodes_yaml + "\ncommand: [train]\n" + more_yaml,
                                            "job.yaml", {})) {
    for (int i = 0; i < sessions_count; ++i) sessions.push_back(std::make_shared<FakeSession>());
    FleetOptions options;
    options.clock = clock;
    auto attached = sessions;
    options.provider = [attached, by_slot]() -> std::unique_ptr<Provider> {
      if (by_slot) return std::make_unique<SlotProvider>(attached);
      return std::make_unique<AttachingProvider>(attached);
    };
    fleet = std::make_unique<Fleet>(spec, options, events, console, interrupts, listener);
    fleet->set_job("job-1", "/tmp");
    fleet->start();
  }
  ~World() {
    fleet.reset();
    std::fclose(console_file);
  }

  void hello(int node, std::optional<unsigned> slot = std::nullopt) {
    AgentHello h;
    h.hostname = "host" + std::to_string(node);
    h.dtrain_version = "test";
    h.agent_address = "10.0.0." + std::to_string(node + 1) + ":29400";
    h.slot = slot;
    report(node, h);
  }
  void report(int node, AgentReport what) {
    Event event;
    event.kind = Event::Kind::report;
    event.node = node;
    event.report = std::move(what);
    events.push(std::move(event));
  }
  // Pumps until `until` on the scripted clock, or until a node is lost.
  void pump(FleetClock::Clock::time_point until) {
    fleet->pump_until([&] { return !listener.lost.empty(); }, until);
  }
  std::vector<int> select(bool first = true) {
    auto selected = fleet->select(first);
    REQUIRE_MESSAGE(selected.ok(), selected.status.message());
    return selected.value;
  }
  template <class T>
  int count_sent(int node) const {
    int n = 0;
    for (const auto& c : sessions[static_cast<std::size_t>(node)]->sent) n += std::holds_alternative<T>(c) ? 1 : 0;
    return n;
  }
};

}  // namespace

TEST_CASE("fleet: node ranks follow join order; a node is configured once, on its hello") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: 3}", 3);
  w.hello(2);
  w.hello(0);
  w.hello(1);
  const auto start = w.clock->now();
  CHECK(w.select() == std::vector<int>{0, 1, 2});
  CHECK(w.clock->now() == start);   // every node was there: no waiting
  for (int node = 0; node < 3; ++node) {
    CHECK(w.count_sent<ConfigureNode>(node) == 1);
    CHECK(w.fleet->state(node) == NodeState::ready);
  }
  // A second hello is ignored (a ready node is not configured again).
  w.hello(1);
  // pop() waits on the real steady clock, which may be behind the scripted one (a machine up for less than an hour).
  w.fleet->pump_until([&] { return w.events.pop(std::chrono::steady_clock::now()) == std::nullopt; },
                      w.clock->now() + 1ms);
  CHECK(w.count_sent<ConfigureNode>(1) == 1);
}

TEST_CASE("fleet: ssh/slurm node ranks follow the agents' slots, whatever the join order") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: 3}", 3, true);
  w.hello(0, 2);
  w.hello(1, 0);
  w.hello(2, 1);
  CHECK(w.select() == std::vector<int>{1, 2, 0});
  CHECK(w.fleet->node_of_slot(2) == 0);
  CHECK(w.fleet->node_of_slot(7) == -1);
}

TEST_CASE("fleet: nodes.count 2:4 waits join_timeout_s for 4, then starts with the 2 that said hello") {
  // A node timeout longer than the wait: nobody is lost over silence here.
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: \"2:4\", join_timeout_s: 60}", 2, false,
          "health: {node_timeout_s: 120}\n");
  w.hello(0);
  w.hello(1);
  const auto start = w.clock->now();
  CHECK(w.select() == std::vector<int>{0, 1});
  CHECK(w.clock->now() - start >= 60s);
  CHECK(w.listener.lost.empty());
}

TEST_CASE("fleet: fewer than MIN after the wait: unavailable, naming the count; the silent agent is lost") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: \"2:4\", join_timeout_s: 30}", 2, false,
          "health: {node_timeout_s: 120}\n");
  w.hello(0);
  const auto selected = w.fleet->select(true);
  REQUIRE_FALSE(selected.ok());
  CHECK(selected.status.code() == dtrain::StatusCode::unavailable);
  CHECK(selected.status.message() == "only 1 node available, nodes.count needs at least 2 (1 missing)");
  REQUIRE(w.listener.lost.size() == 1);
  CHECK(w.listener.lost[0] == "node 1 (10.0.0.9:29400) lost: its agent did not say hello in time");
  CHECK(w.fleet->state(1) == NodeState::lost);
  CHECK(w.sessions[1]->cancelled);
}

TEST_CASE("fleet: an agent silent for health.node_timeout_s is lost, and its session cancelled") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: 2}", 2);
  w.hello(0);
  w.hello(1);
  CHECK(w.select() == std::vector<int>{0, 1});
  // Node 0 keeps answering; node 1 says nothing more.
  const auto until = w.clock->now() + 30s;
  while (w.clock->now() < until && w.listener.lost.empty()) {
    Event beat;
    beat.kind = Event::Kind::report;
    beat.node = 0;
    beat.report = AgentAlive{};
    w.events.push(beat);
    w.fleet->pump_until([&] { return !w.listener.lost.empty(); }, w.clock->now() + 1s);
  }
  REQUIRE(w.listener.lost.size() == 1);
  CHECK(w.listener.lost[0] == "node 1 (host1) lost: no message from its agent for 10000 ms (health.node_timeout_s)");
  CHECK(w.fleet->state(0) == NodeState::ready);
  CHECK(w.fleet->gone(1));
  CHECK(w.sessions[1]->cancelled);
  // Heartbeats went out meanwhile, about five per node timeout.
  CHECK(w.count_sent<Heartbeat>(0) >= 5);
}

TEST_CASE("fleet: heartbeats every node_timeout_s / 5, the job monitor's tick every second all the same") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: 1}", 1, false, "health: {node_timeout_s: 30}\n");
  w.hello(0);
  CHECK(w.select() == std::vector<int>{0});
  const int before = w.count_sent<Heartbeat>(0);
  w.listener.ticks.clear();
  // 24 s in which the agent keeps answering (so that it is not lost) once every 5 s.
  const auto from = w.clock->now();
  while (w.clock->now() < from + 24s) {
    Event beat;
    beat.kind = Event::Kind::report;
    beat.node = 0;
    beat.report = AgentAlive{};
    w.events.push(beat);
    w.fleet->pump_until([] { return false; }, std::min(w.clock->now() + 5s, from + 24s));
  }
  // One heartbeat every 6 s (3 or 4 in 24 s, by where the first falls), where a cap of 1 s would have sent 24.
  const int sent = w.count_sent<Heartbeat>(0) - before;
  CHECK(sent >= 3);
  CHECK(sent <= 4);
  REQUIRE(w.listener.ticks.size() >= 24);
  for (std::size_t i = 1; i < w.listener.ticks.size(); ++i) {
    CHECK(w.listener.ticks[i] - w.listener.ticks[i - 1] <= Fleet::kTickInterval);
  }
}

TEST_CASE("fleet: a lost node takes no further part: no commands, its reports dropped, never selected again") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: \"1:2\", join_timeout_s: 5}", 2);
  w.hello(0);
  w.hello(1);
  CHECK(w.select() == std::vector<int>{0, 1});
  w.fleet->lose(1, "a test");
  w.fleet->lose(1, "twice");   // lost once is enough
  CHECK(w.listener.lost == std::vector<std::string>{"node 1 (host1) lost: a test"});
  const auto sent = w.sessions[1]->sent.size();
  w.fleet->send(1, StopGroup{0, 0, "x"});
  CHECK(w.sessions[1]->sent.size() == sent);
  const int reports = w.listener.reports;
  Event late;
  late.kind = Event::Kind::report;
  late.node = 1;
  late.report = GroupDone{0};
  w.events.push(late);
  w.fleet->pump_until([] { return false; }, w.clock->now() + 1ms);
  CHECK(w.listener.reports == reports);
  CHECK(w.select(false) == std::vector<int>{0});
}

namespace {

// Two nodes (provider join), health.node_timeout_s 10, both said hello and were selected.
struct TwoNodes : World {
  TwoNodes() : World("{provider: join, rendezvous: \"127.0.0.1:29999\", count: 2}", 2, false,
                     "health: {node_timeout_s: 10}\n") {
    hello(0);
    hello(1);
    select();
  }
};

}  // namespace

TEST_CASE("fleet silence: a launcher that could not run for 3 node timeouts loses no node for it") {
  TwoNodes f;
  const auto start = f.clock->now();
  f.clock->time += 30s;   // stopped (SIGSTOP) for 30 s with node_timeout_s 10
  f.clock->stall += 30s;
  f.report(0, AgentAlive{});
  f.report(1, AgentAlive{});
  f.pump(f.clock->now() + 1ms);
  CHECK(f.listener.lost.empty());
  CHECK_FALSE(f.fleet->gone(0));
  CHECK_FALSE(f.fleet->gone(1));
  // Its own time still counts: node 1 says nothing more and is lost 10 s of running time after its message.
  const auto heard = f.clock->now();
  while (f.listener.lost.empty() && f.clock->now() < start + 2min) {
    f.report(0, AgentAlive{});
    f.pump(f.clock->now() + 1s);
  }
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.listener.lost[0] == "node 1 (host1) lost: no message from its agent for 10000 ms (health.node_timeout_s)");
  CHECK(f.clock->now() - heard >= 10s);
  CHECK(f.clock->now() - heard <= 11s);
}

TEST_CASE("fleet silence: a stall while a node is silent moves its deadline by the stall") {
  TwoNodes f;
  const auto heard = f.clock->now();
  f.clock->time += 6s;    // 6 s of running time, then 3 s stalled
  f.clock->stall += 3s;
  f.clock->time += 3s;
  while (f.listener.lost.empty() && f.clock->now() < heard + 1min) {
    f.report(0, AgentAlive{});
    f.pump(f.clock->now() + 500ms);
  }
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.clock->now() - heard >= 13s);
  CHECK(f.clock->now() - heard <= 14s);
}

TEST_CASE("fleet silence: a heartbeat queued behind a backlog counts before anyone is judged") {
  TwoNodes f;
  // The launcher was busy for 12 s (no stall: it ran, but not its event loop); meanwhile node 0 sent a backlog
  // and node 1's heartbeat is the last thing queued.
  f.clock->time += 12s;
  for (int i = 0; i < 1000; ++i) f.report(0, AgentAlive{});
  f.report(1, AgentAlive{});
  f.pump(f.clock->now() + 1ms);
  CHECK(f.listener.lost.empty());
  CHECK_FALSE(f.fleet->gone(1));
}

TEST_CASE("fleet silence: a node whose message does not come after the backlog is lost once the backlog is read") {
  TwoNodes f;
  f.clock->time += 12s;
  for (int i = 0; i < 100; ++i) f.report(0, AgentAlive{});
  f.pump(f.clock->now() + 1ms);
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.listener.lost[0].find("node 1 (host1) lost") == 0);
  CHECK(f.sessions[1]->cancelled);
  CHECK_FALSE(f.fleet->gone(0));
}

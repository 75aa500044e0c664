// The Fleet with scripted sessions, provider and clock: which nodes a round gets (join order, slots, nodes.count
// MIN:MAX), and when a node is given up. The clock jumps to each deadline when no event is queued, so minutes of
// join and node timeouts take no time. Silence is judged fairly: a launcher that could not run (a scripted stall)
// does not blame its nodes for that time, heartbeats queued behind a backlog count before anyone is judged, and a
// node that really is silent is still given up at its deadline.

#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
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
  std::uint64_t unix_ms() const override {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
    return 1'800'000'000'000ULL + static_cast<std::uint64_t>(ms);
  }
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
  // What the console said so far.
  std::string console_text() const {
    std::fflush(console_file);
    std::rewind(console_file);
    std::string text;
    char buffer[4096];
    while (std::size_t n = std::fread(buffer, 1, sizeof buffer, console_file)) text.append(buffer, n);
    return text;
  }
  // A heartbeat of node `node` read `late` after it was sent, by a clock `ahead` of the launcher's.
  void beat(int node, std::chrono::milliseconds late, std::chrono::milliseconds ahead = {}) {
    Event event;
    event.kind = Event::Kind::report;
    event.node = node;
    event.report = AgentAlive{};
    event.sent_unix_ms =
        static_cast<std::uint64_t>(static_cast<std::int64_t>(clock->unix_ms()) - late.count() + ahead.count());
    events.push(std::move(event));
  }
  // Pumps until `until` on the scripted clock, or until a node is lost.
  void pump(FleetClock::Clock::time_point until) {
    fleet->pump_until([&] { return !listener.lost.empty(); }, until);
  }
  // Until a node is lost or `until`: `alive()` (what the nodes still heard from say), then `step` of pumping.
  void pump_until_lost(FleetClock::Clock::time_point until, const std::function<void()>& alive,
                       FleetClock::Clock::duration step = std::chrono::seconds(1)) {
    while (listener.lost.empty() && clock->now() < until) {
      alive();
      pump(clock->now() + step);
    }
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
  w.pump_until_lost(w.clock->now() + 30s, [&] { w.report(0, AgentAlive{}); });
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
  f.pump_until_lost(start + 2min, [&] { f.report(0, AgentAlive{}); });
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
  f.pump_until_lost(heard + 1min, [&] { f.report(0, AgentAlive{}); }, 500ms);
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

TEST_CASE("fleet silence: while the launcher reads every agent late, a silent node's deadline moves by that lag") {
  TwoNodes f;
  const auto heard = f.clock->now();
  f.beat(0, 0ms);   // node 0's best: read at once
  f.pump(f.clock->now() + 1ms);
  // From now on the launcher reads node 0's heartbeats 4 s after they were sent.
  f.pump_until_lost(heard + 1min, [&] { f.beat(0, 4000ms); });
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.listener.lost[0] == "node 1 (host1) lost: no message from its agent for 10000 ms (health.node_timeout_s), "
                              "and 4000 ms more while the launcher read its agents that late");
  CHECK(f.console_text().find("the launcher reads its agents' messages 4000 ms late (its own backlog, or a loaded "
                              "machine): silence deadlines move by that much") != std::string::npos);
  CHECK(f.clock->now() - heard >= 14s);
  CHECK(f.clock->now() - heard <= 15s);
}

TEST_CASE("fleet silence: one slow agent, or one whose clock is an hour off, moves no other node's deadline") {
  World w("{provider: join, rendezvous: \"127.0.0.1:29999\", count: 3}", 3, false, "health: {node_timeout_s: 10}\n");
  w.hello(0);
  w.hello(1);
  w.hello(2);
  CHECK(w.select() == std::vector<int>{0, 1, 2});
  const auto heard = w.clock->now();
  w.beat(0, 0ms, 1h);
  w.beat(2, 0ms);
  w.pump(w.clock->now() + 1ms);
  w.pump_until_lost(heard + 1min, [&] {
    w.beat(0, 0ms, 1h);   // read on time, by a clock an hour ahead
    w.beat(2, 4000ms);    // its own messages 4 s late (a slow agent or link)
  });
  REQUIRE(w.listener.lost.size() == 1);
  CHECK(w.listener.lost[0] == "node 1 (host1) lost: no message from its agent for 10000 ms (health.node_timeout_s)");
  CHECK(w.clock->now() - heard >= 10s);
  CHECK(w.clock->now() - heard <= 11s);
}

TEST_CASE("read lag: each second's median, the largest of the horizon, capped by it and forgotten after it") {
  using std::chrono::milliseconds;
  ReadLag lag(10s);
  const auto t0 = ReadLag::Clock::time_point() + 1h;
  const std::uint64_t u0 = 1'800'000'000'000ULL;
  CHECK(lag.lag(t0) == 0ms);
  // Floors: every node's first heartbeat read on time, whatever its clock's offset.
  lag.sample(0, u0, u0, t0);
  lag.sample(1, u0 + 3'600'000, u0, t0);
  lag.sample(2, u0 - 50, u0, t0);
  CHECK(lag.lag(t0) == 0ms);
  // The next second: nodes 0 and 1 read 2 s late, node 2 9 s late: the median is 2 s.
  const auto t1 = t0 + 1500ms;
  lag.sample(0, u0 + 1000, u0 + 3000, t1);
  lag.sample(1, u0 + 3'600'000 + 1000, u0 + 3000, t1);
  lag.sample(2, u0 - 50 + 1000, u0 + 10'000, t1);
  CHECK(lag.lag(t1) == 2000ms);
  // Later seconds read on time: the 2 s stays the largest for the horizon, then is forgotten.
  for (int s = 3; s <= 14; ++s) {
    const auto t = t0 + std::chrono::seconds(s);
    const std::uint64_t u = u0 + static_cast<std::uint64_t>(s) * 1000;
    lag.sample(0, u, u, t);
    lag.sample(1, u + 3'600'000, u, t);
    CHECK(lag.lag(t) == (s <= 12 ? 2000ms : 0ms));   // its second ended at 2.5 s
  }
  // A lag longer than the horizon counts as the horizon; a heartbeat without a send time is no sample.
  const auto t2 = t0 + 20s;
  lag.sample(0, u0 + 1000, u0 + 60'000, t2);
  lag.sample(1, 0, u0 + 60'000, t2);
  CHECK(lag.lag(t2) == 10s);
}

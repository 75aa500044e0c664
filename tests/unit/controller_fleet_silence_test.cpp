// The Fleet's judgement of silence with a scripted clock: a launcher that could not run (a scripted stall) does not
// blame its nodes for that time, heartbeats queued behind a backlog count before anyone is judged, and a node that
// really is silent is still given up at its deadline.

#include <doctest/doctest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/controller/fleet/fleet.h"
#include "cli/spec/spec.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

// Time moves only when the test moves it or the queue is empty (then to the fleet's deadline); stalls as scripted.
class StallingClock final : public FleetClock {
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

class QuietSession final : public NodeSession {
 public:
  bool send(const Command&) override { return true; }
  bool send_last(const Command& command) override { return send(command); }
  dtrain::Status finish() override {
    finished = true;
    return {};
  }
  void cancel() override { cancelled = true; }
  std::string address() const override { return "10.0.0.9:29400"; }
  bool open() const override { return !finished && !cancelled; }
  bool cancelled = false;
  bool finished = false;
};

class Attaching final : public Provider {
 public:
  explicit Attaching(std::vector<std::shared_ptr<QuietSession>> sessions) : sessions_(std::move(sessions)) {}
  void start(ProviderFleet& fleet) override {
    for (std::size_t i = 0; i < sessions_.size(); ++i) fleet.attach(static_cast<int>(i), sessions_[i]);
  }
  std::chrono::milliseconds node_wait(bool, const ProviderFleet& fleet) const override {
    return dtrain::spec::duration_ms(fleet.spec().nodes.join_timeout_s);
  }
  bool may_still_join(const ProviderFleet&) const override { return true; }

 private:
  std::vector<std::shared_ptr<QuietSession>> sessions_;
};

struct Lost final : FleetListener {
  std::vector<std::string> lost;
  void on_signal(int signal) override { CHECK_MESSAGE(signal != 0, "the drain marker reached the listener"); }
  void on_report(int, const AgentReport&) override {}
  void on_node_lost(int, const std::string& text) override { lost.push_back(text); }
};

// Two nodes (provider join), health.node_timeout_s 10, both said hello and were selected.
struct Fleet2 {
  dtrain::spec::Spec spec = dtrain::spec::load_spec_string(
      "name: job\nnodes: {provider: join, rendezvous: \"127.0.0.1:29999\", count: 2}\ncommand: [train]\n"
      "health: {node_timeout_s: 10}\n",
      "job.yaml", {});
  std::vector<std::shared_ptr<QuietSession>> sessions{std::make_shared<QuietSession>(),
                                                      std::make_shared<QuietSession>()};
  std::shared_ptr<StallingClock> clock = std::make_shared<StallingClock>();
  EventQueue events;
  std::FILE* console_file = std::tmpfile();
  Console console{console_file, console_file};
  Interrupts interrupts{2000ms, 600ms};
  Lost listener;
  std::unique_ptr<Fleet> fleet;

  Fleet2() {
    FleetOptions options;
    options.clock = clock;
    auto attached = sessions;
    options.provider = [attached]() -> std::unique_ptr<Provider> { return std::make_unique<Attaching>(attached); };
    fleet = std::make_unique<Fleet>(spec, options, events, console, interrupts, listener);
    fleet->set_job("job-1", "/tmp");
    fleet->start();
    for (int node = 0; node < 2; ++node) {
      AgentHello h;
      h.hostname = "host" + std::to_string(node);
      h.dtrain_version = "test";
      h.agent_address = "10.0.0." + std::to_string(node + 1) + ":29400";
      push(node, h);
    }
    auto selected = fleet->select(true);
    REQUIRE(selected.ok());
  }
  ~Fleet2() {
    fleet.reset();
    std::fclose(console_file);
  }
  void push(int node, AgentReport report) {
    Event event;
    event.kind = Event::Kind::report;
    event.node = node;
    event.report = std::move(report);
    events.push(std::move(event));
  }
  // Pumps until `until` on the scripted clock, or until a node is lost.
  void pump(FleetClock::Clock::time_point until) {
    fleet->pump_until([&] { return !listener.lost.empty(); }, until);
  }
};

}  // namespace

TEST_CASE("fleet silence: a launcher that could not run for 3 node timeouts loses no node for it") {
  Fleet2 f;
  const auto start = f.clock->now();
  f.clock->time += 30s;   // stopped (SIGSTOP) for 30 s with node_timeout_s 10
  f.clock->stall += 30s;
  f.push(0, AgentAlive{});
  f.push(1, AgentAlive{});
  f.pump(f.clock->now() + 1ms);
  CHECK(f.listener.lost.empty());
  CHECK_FALSE(f.fleet->gone(0));
  CHECK_FALSE(f.fleet->gone(1));
  // Its own time still counts: node 1 says nothing more and is lost 10 s of running time after its message.
  const auto heard = f.clock->now();
  while (f.listener.lost.empty() && f.clock->now() < start + 2min) {
    f.push(0, AgentAlive{});
    f.pump(f.clock->now() + 1s);
  }
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.listener.lost[0] == "node 1 (host1) lost: no message from its agent for 10000 ms (health.node_timeout_s)");
  CHECK(f.clock->now() - heard >= 10s);
  CHECK(f.clock->now() - heard <= 11s);
}

TEST_CASE("fleet silence: a stall while a node is silent moves its deadline by the stall") {
  Fleet2 f;
  const auto heard = f.clock->now();
  f.clock->time += 6s;    // 6 s of running time, then 3 s stalled
  f.clock->stall += 3s;
  f.clock->time += 3s;
  while (f.listener.lost.empty() && f.clock->now() < heard + 1min) {
    f.push(0, AgentAlive{});
    f.pump(f.clock->now() + 500ms);
  }
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.clock->now() - heard >= 13s);
  CHECK(f.clock->now() - heard <= 14s);
}

TEST_CASE("fleet silence: a heartbeat queued behind a backlog counts before anyone is judged") {
  Fleet2 f;
  // The launcher was busy for 12 s (no stall: it ran, but not its event loop); meanwhile node 0 sent a backlog
  // and node 1's heartbeat is the last thing queued.
  f.clock->time += 12s;
  for (int i = 0; i < 1000; ++i) f.push(0, AgentAlive{});
  f.push(1, AgentAlive{});
  f.pump(f.clock->now() + 1ms);
  CHECK(f.listener.lost.empty());
  CHECK_FALSE(f.fleet->gone(1));
}

TEST_CASE("fleet silence: a node whose message does not come after the backlog is lost once the backlog is read") {
  Fleet2 f;
  f.clock->time += 12s;
  for (int i = 0; i < 100; ++i) f.push(0, AgentAlive{});
  f.pump(f.clock->now() + 1ms);
  REQUIRE(f.listener.lost.size() == 1);
  CHECK(f.listener.lost[0].find("node 1 (host1) lost") == 0);
  CHECK(f.sessions[1]->cancelled);
  CHECK_FALSE(f.fleet->gone(0));
}

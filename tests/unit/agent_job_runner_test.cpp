// JobRunner without a session: the round's state diagram (transition), including the moves that must never happen,
// and the runner itself driving real short processes through its domain interface (GroupSpec in, RunnerEvent out).
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "agent/job/job_runner.h"
#include "agent/job/round_state.h"
#include "agent/supervisor/supervisor.h"
#include "tests/unit/eventually.h"
#include "tests/unit/temp_dir.h"

using namespace std::chrono_literals;
using dtrain::StatusCode;
using dtrain::agent::GroupDone;
using dtrain::agent::GroupSpec;
using dtrain::agent::GroupStopped;
using dtrain::agent::JobFiles;
using dtrain::agent::JobRunner;
using dtrain::agent::JobRunnerHooks;
using dtrain::agent::LogLine;
using dtrain::agent::RoundEvent;
using dtrain::agent::RoundState;
using dtrain::agent::RunnerEvent;
using dtrain::agent::transition;
using dtrain::agent::WorkerExited;
using dtrain::agent::WorkerSpec;
using dtrain::agent::WorkerStarted;

namespace {

// Test binaries have no threads before main(); the runner's supervisor needs this done first.
const bool kProcessPrepared = (dtrain::supervisor::prepare_process(), true);

constexpr char kJob[] = "tiny-20261130-120000";

// Collects what the runner emits, for the test thread to wait on.
class Events {
 public:
  JobRunner::Emit sink() {
    return [this](RunnerEvent event) {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    };
  }
  template <class Event>
  std::vector<Event> all() const {
    std::lock_guard lock(mutex_);
    std::vector<Event> found;
    for (const auto& e : events_) {
      if (const auto* event = std::get_if<Event>(&e)) found.push_back(*event);
    }
    return found;
  }
  template <class Event>
  bool arrives(std::size_t count = 1) const {
    return eventually([&] { return all<Event>().size() >= count; }, 10s);
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return events_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<RunnerEvent> events_;
};

WorkerSpec shell(std::uint32_t rank, const std::string& script) {
  WorkerSpec worker;
  worker.rank = rank;
  worker.argv = {"sh", "-c", script};
  return worker;
}

// A runner with its job directory set, as after Configure.
struct Fixture {
  TempDir run_dir{"dtrain-job-runner-test"};
  dtrain::store::Store store;
  Events events;
  JobRunner runner;
  explicit Fixture(JobRunnerHooks hooks = {}) : runner(store, "127.0.0.1", "127.0.0.1:29400", std::move(hooks)) {
    REQUIRE(kProcessPrepared);
    runner.set_job_files(JobFiles::for_job(run_dir.path, kJob).value);
    runner.set_emit(events.sink());
  }
  ~Fixture() { store.shutdown(); }
};

}  // namespace

TEST_CASE("the round's legal moves follow the diagram") {
  CHECK(transition(RoundState::idle, RoundEvent::prepare) == RoundState::prepared);
  CHECK(transition(RoundState::idle, RoundEvent::start) == RoundState::running);
  CHECK(transition(RoundState::prepared, RoundEvent::start) == RoundState::running);
  CHECK(transition(RoundState::running, RoundEvent::all_exited) == RoundState::done);
  CHECK(transition(RoundState::running, RoundEvent::stop) == RoundState::stopping);
  CHECK(transition(RoundState::done, RoundEvent::stop) == RoundState::stopping);
  CHECK(transition(RoundState::stopping, RoundEvent::swept) == RoundState::stopped);
  // A new round starts from the end of the previous one, on node 0 after preparing it again.
  CHECK(transition(RoundState::done, RoundEvent::start) == RoundState::running);
  CHECK(transition(RoundState::stopped, RoundEvent::start) == RoundState::running);
  CHECK(transition(RoundState::done, RoundEvent::prepare) == RoundState::prepared);
  CHECK(transition(RoundState::stopped, RoundEvent::prepare) == RoundState::prepared);
  // The launcher's StopGroup is obeyed whatever the state, and a second stop while one sweeps joins it.
  for (RoundState from : {RoundState::idle, RoundState::prepared, RoundState::stopped, RoundState::stopping}) {
    CHECK(transition(from, RoundEvent::stop) == RoundState::stopping);
  }
}

TEST_CASE("the round's moves that must never happen are refused") {
  // A group that runs, or is being stopped, is never replaced by another nor re-prepared under it.
  for (RoundState busy : {RoundState::running, RoundState::stopping}) {
    CHECK_FALSE(transition(busy, RoundEvent::start).has_value());
    CHECK_FALSE(transition(busy, RoundEvent::prepare).has_value());
  }
  // done and stopped become running only through a new start: no late exit or sweep revives or re-ends a round.
  for (RoundState ended : {RoundState::done, RoundState::stopped}) {
    CHECK_FALSE(transition(ended, RoundEvent::all_exited).has_value());
    CHECK_FALSE(transition(ended, RoundEvent::swept).has_value());
  }
  // Exits during a stop are the stop's doing: no GroupDone for a stopped group.
  CHECK_FALSE(transition(RoundState::stopping, RoundEvent::all_exited).has_value());
  // A sweep that ends after a new group started leaves that group running.
  CHECK_FALSE(transition(RoundState::running, RoundEvent::swept).has_value());
  CHECK_FALSE(transition(RoundState::idle, RoundEvent::all_exited).has_value());
  CHECK_FALSE(transition(RoundState::prepared, RoundEvent::all_exited).has_value());
  CHECK_FALSE(transition(RoundState::idle, RoundEvent::swept).has_value());
}

TEST_CASE("a group whose workers exit by themselves is done, and the next round starts from there") {
  Fixture f;
  REQUIRE(f.runner.state() == RoundState::idle);
  REQUIRE(f.runner.start_group(GroupSpec{1, {shell(0, "exit 3"), shell(1, "exit 0")}, "token-1"}).ok());
  REQUIRE(f.events.arrives<GroupDone>());
  CHECK(f.events.all<GroupDone>().front().round == 1);
  CHECK(f.runner.state() == RoundState::done);
  CHECK(f.events.all<WorkerStarted>().size() == 2);
  const auto exits = f.events.all<WorkerExited>();
  REQUIRE(exits.size() == 2);
  for (const auto& e : exits) {
    CHECK(e.round == 1);
    CHECK(e.exit.exit_code == (e.rank == 0 ? 3 : 0));
    CHECK_FALSE(e.exit.stopped);
  }
  CHECK(f.runner.current_token() == "token-1");

  REQUIRE(f.runner.start_group(GroupSpec{2, {shell(0, "sleep 30")}, "token-2"}).ok());
  CHECK(f.runner.state() == RoundState::running);
  CHECK(f.runner.current_token() == "token-2");
  CHECK(f.runner.stop_and_wait(100ms, 10s));
  CHECK(f.runner.state() == RoundState::stopped);
}

TEST_CASE("the before-exit hook runs for each reaped worker before its WorkerExited is emitted") {
  std::mutex mutex;
  std::vector<std::size_t> exits_seen;   // how many WorkerExited had been emitted at each call
  Events* events = nullptr;              // the fixture's, once it is made
  JobRunnerHooks hooks;
  hooks.before_exit = [&] {
    std::lock_guard lock(mutex);
    exits_seen.push_back(events->all<WorkerExited>().size());
  };
  Fixture f(std::move(hooks));
  events = &f.events;
  REQUIRE(f.runner.start_group(GroupSpec{1, {shell(0, "exit 0"), shell(1, "sleep 0.2")}, "token-1"}).ok());
  REQUIRE(f.events.arrives<GroupDone>());
  std::lock_guard lock(mutex);
  CHECK(exits_seen == std::vector<std::size_t>{0, 1});
  CHECK(f.events.all<WorkerExited>().size() == 2);
}

TEST_CASE("start_group while a group runs is refused; stop_group ends it as stopped, not done") {
  Fixture f;
  REQUIRE(f.runner.start_group(GroupSpec{1, {shell(0, "sleep 30")}, "token-1"}).ok());
  REQUIRE(f.events.arrives<WorkerStarted>());
  const dtrain::Status refused = f.runner.start_group(GroupSpec{2, {shell(0, "exit 0")}, "token-2"});
  CHECK(refused.code() == StatusCode::failed_precondition);
  CHECK(refused.message() == "round 1 is still running on this node; stop it before starting round 2");
  CHECK(f.runner.state() == RoundState::running);
  CHECK(f.runner.current_token() == "token-1");

  f.runner.stop_group(1, 100ms);
  REQUIRE(f.events.arrives<GroupStopped>());
  CHECK(f.events.all<GroupStopped>().front().round == 1);
  CHECK(f.runner.state() == RoundState::stopped);
  const auto exits = f.events.all<WorkerExited>();
  REQUIRE(exits.size() == 1);
  CHECK(exits.front().exit.stopped);
  CHECK(f.events.all<GroupDone>().empty());
}

TEST_CASE("a log path outside the job's directory starts nothing") {
  Fixture f;
  WorkerSpec worker = shell(0, "exit 0");
  worker.log_path = "../elsewhere.log";
  const dtrain::Status refused = f.runner.start_group(GroupSpec{1, {worker}, "token-1"});
  CHECK(refused.code() == StatusCode::invalid_argument);
  CHECK(refused.message().starts_with("round 1 not started: "));
  CHECK(f.runner.state() == RoundState::idle);
  CHECK(f.events.size() == 0);
}

TEST_CASE("a group with no worker on this node is done at once") {
  Fixture f;
  REQUIRE(f.runner.start_group(GroupSpec{4, {}, "token-4"}).ok());
  REQUIRE(f.events.arrives<GroupDone>());
  CHECK(f.events.all<GroupDone>().front().round == 4);
  CHECK(f.runner.state() == RoundState::done);
}

TEST_CASE("prepare_round opens the round's store namespace and answers with the port and store address") {
  Fixture f;
  const auto prepared = f.runner.prepare_round({3, "store-token-3"});
  CHECK(prepared.round == 3);
  CHECK(prepared.master_port != 0);
  CHECK(prepared.store_address == "127.0.0.1:29400");
  CHECK(f.runner.state() == RoundState::prepared);
  const std::vector<std::string> keys{"k"};
  CHECK(f.store.check("store-token-3", keys).ok());
}

TEST_CASE("streamed output reaches the events, and a report counts only with the worker's own token") {
  Fixture f;
  WorkerSpec worker = shell(0, "echo \"$DTRAIN_REPORT_TOKEN\"");
  worker.stream_stdout = true;
  REQUIRE(f.runner.start_group(GroupSpec{1, {worker, shell(1, "echo unheard")}, "token-1"}).ok());
  REQUIRE(f.events.arrives<GroupDone>());
  const auto lines = f.events.all<LogLine>();
  REQUIRE(lines.size() == 1);   // rank 1 does not stream its stdout
  CHECK(lines.front().rank == 0);
  CHECK_FALSE(lines.front().is_stderr);
  const std::string token = lines.front().text;
  CHECK(token.size() == 32);
  CHECK(f.runner.check_reporter(0, token).ok());
  CHECK(f.runner.check_reporter(1, token).code() == StatusCode::permission_denied);
  const dtrain::Status stranger = f.runner.check_reporter(7, token);
  CHECK(stranger.code() == StatusCode::permission_denied);
  CHECK(stranger.message() == "rank 7 is not a worker of this node in this round");
}

TEST_CASE("only the worker process itself speaks for its rank: its pid, not its child's or a stranger's") {
  Fixture f;
  REQUIRE(f.runner.start_group(GroupSpec{1, {shell(0, "sleep 30")}, "token-1"}).ok());
  REQUIRE(f.events.arrives<WorkerStarted>());
  const pid_t worker = f.events.all<WorkerStarted>().front().pid;
  CHECK(f.runner.check_sender(0, worker).ok());
  const dtrain::Status child = f.runner.check_sender(0, worker + 1);
  CHECK(child.code() == StatusCode::failed_precondition);
  CHECK(child.message().find("sent by pid " + std::to_string(worker + 1) + ", not by rank 0's worker process (pid " +
                             std::to_string(worker) + ")") == 0);
  CHECK(f.runner.check_sender(0, 0).code() == StatusCode::failed_precondition);   // no credentials
  CHECK(f.runner.check_sender(3, worker).code() == StatusCode::failed_precondition);   // not a rank of this node
  f.runner.stop_group(1, 0ms);
  REQUIRE(f.events.arrives<GroupStopped>());
}

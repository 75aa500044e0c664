#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>

#include "agent/supervisor/testing/event_recorder.h"
#include "tests/unit/eventually.h"
#include "tests/unit/parent_of.h"

using namespace dtrain::supervisor;
using namespace std::chrono_literals;
using dtrain::supervisor::testing::EventRecorder;
using dtrain::supervisor::testing::shell;
using dtrain::supervisor::testing::StopWaiter;

namespace {

// The pid a worker printed as "<tag>:<pid>".
pid_t printed_pid(EventRecorder& recorder, std::uint64_t id, const std::string& tag) {
  for (const auto& line : recorder.texts(id, false)) {
    if (line.rfind(tag + ":", 0) == 0) return std::stoi(line.substr(tag.size() + 1));
  }
  return 0;
}

bool exists(pid_t pid) { return read_process_stat(pid).has_value(); }

pid_t session_of(pid_t pid) {
  const auto stat = read_process_stat(pid);
  return stat ? stat->sid : 0;
}

}  // namespace

TEST_CASE("stop_all: kills groups, TERM-ignoring, setsid and double-forked processes, then nothing is left") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({
      shell(1, "sleep 300"),
      shell(2, "trap '' TERM; setsid sleep 300 & echo stubborn:$!; sleep 300"),
      shell(3, "setsid sleep 300 & echo setsid:$!; wait"),
      shell(4, "(sleep 300 & echo daemon:$!); sleep 300"),
  });
  REQUIRE(recorder.wait_lines(2, 1));
  REQUIRE(recorder.wait_lines(3, 1));
  REQUIRE(recorder.wait_lines(4, 1));
  const pid_t setsid_pid = printed_pid(recorder, 3, "setsid");
  const pid_t daemon_pid = printed_pid(recorder, 4, "daemon");
  REQUIRE(setsid_pid > 0);
  REQUIRE(daemon_pid > 0);
  const pid_t worker3 = *recorder.wait_started(3);
  const pid_t keeper4 = parent_of(*recorder.wait_started(4));
  // The cases are what they claim: a new session outside the worker's group, and an orphan reparented to the
  // subreaper of its worker's tree, the keeper (our child).
  CHECK(eventually([&] { return session_of(setsid_pid) == setsid_pid; }));
  CHECK(read_process_stat(setsid_pid)->pgid != worker3);
  CHECK(parent_of(keeper4) == getpid());
  CHECK(eventually([&] { return parent_of(daemon_pid) == keeper4; }));
  // The TERM trap is in place once the shell has started its sleep; the setsid'd one left the group and ignores
  // TERM too, so only the scan's SIGKILL reaches it.
  const pid_t stubborn = printed_pid(recorder, 2, "stubborn");
  CHECK(eventually([&] { return descendants(*recorder.wait_started(2)).size() >= 2; }));
  CHECK(eventually([&] { return session_of(stubborn) == stubborn; }));

  const auto before = descendants(getpid());
  CHECK(before.size() >= 12);  // 4 keepers, 4 workers, 4 sleeps at least
  StopWaiter waiter;
  const auto stop_started = std::chrono::steady_clock::now();
  supervisor.stop_all(300ms, waiter.callback());
  const auto result = waiter.wait();
  const auto took = std::chrono::steady_clock::now() - stop_started;
  REQUIRE(result);
  // Worker 2 (its shell, unless the shell exec'd its last command, and its sleep) and the setsid'd sleep ignore
  // TERM (inherited) and needed SIGKILL; nothing else did.
  CHECK(result->at(0) >= 2);
  CHECK(result->at(0) <= 3);
  CHECK(took >= 300ms);
  CHECK(took < 5s);

  for (std::uint64_t id = 1; id <= 4; ++id) {
    CAPTURE(id);
    const auto exit = recorder.wait_exit(id, 0ms);  // all exits come before done
    REQUIRE(exit);
    CHECK(exit->exit.stopped);
    CHECK(exit->exit.signal == (id == 2 ? SIGKILL : SIGTERM));
  }
  CHECK(descendants(getpid()).empty());
  for (const pid_t pid : before) {
    CAPTURE(pid);
    CHECK_FALSE(exists(pid));
  }
  CHECK(supervisor.running() == 0);
}

TEST_CASE("stop_all: forks racing the scan are caught by repeated passes") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  // Ignores TERM and keeps forking sleeps while it is being killed.
  supervisor.spawn({shell(1, "trap '' TERM; i=0; while [ $i -lt 300 ]; do sleep 300 & i=$((i+1)); done; wait")});
  CHECK(eventually([&] { return descendants(getpid()).size() >= 50; }));
  StopWaiter waiter;
  supervisor.stop_all(0ms, waiter.callback());
  const auto result = waiter.wait();
  REQUIRE(result);
  CHECK(result->at(0) >= 1);
  CHECK(descendants(getpid()).empty());
  REQUIRE(recorder.wait_exit(1, 0ms));
  CHECK(recorder.wait_exit(1, 0ms)->exit.signal == SIGKILL);
}

TEST_CASE("stop_all: a second call joins the running sweep; with nothing running done comes at once") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  StopWaiter idle;
  supervisor.stop_all(10s, idle.callback());
  const auto nothing = idle.wait(1, 2s);
  REQUIRE(nothing);
  CHECK(nothing->at(0) == 0);

  supervisor.spawn({shell(1, "trap '' TERM; sleep 300")});
  CHECK(eventually([&] { return !descendants(*recorder.wait_started(1)).empty(); }));
  StopWaiter both;
  supervisor.stop_all(200ms, both.callback());
  supervisor.stop_all(10s, both.callback());  // its longer grace does not extend the running sweep
  const auto results = both.wait(2, 5s);
  REQUIRE(results);
  CHECK(results->at(0) == results->at(1));
  CHECK(results->at(0) >= 1);
}

TEST_CASE("stop_all: spawn is refused while a stop is in progress and works again after done") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({shell(1, "trap '' TERM; sleep 300")});
  CHECK(eventually([&] { return !descendants(*recorder.wait_started(1)).empty(); }));
  StopWaiter waiter;
  supervisor.stop_all(500ms, waiter.callback());
  supervisor.spawn({shell(2, "exit 0")});
  const auto refused = recorder.wait_exit(2, 0ms);
  REQUIRE(refused);
  CHECK(refused->exit.spawn_error.find("stop_all is in progress") != std::string::npos);
  REQUIRE(waiter.wait());
  supervisor.spawn({shell(3, "exit 4")});
  REQUIRE(recorder.wait_exit(3));
  CHECK(recorder.wait_exit(3)->exit.exit_code == 4);
  CHECK_FALSE(recorder.wait_exit(3)->exit.stopped);

  // The restart path: spawn from inside done (it runs there and then, on the supervisor's thread).
  supervisor.spawn({shell(4, "sleep 300")});
  REQUIRE(recorder.wait_started(4));
  StopWaiter restarted;
  supervisor.stop_all(1s, [&](unsigned sigkilled) {
    supervisor.spawn({shell(5, "exit 6")});
    restarted.callback()(sigkilled);
  });
  REQUIRE(restarted.wait());
  CHECK(recorder.wait_exit(4, 0ms)->exit.signal == SIGTERM);
  const auto again = recorder.wait_exit(5);
  REQUIRE(again);
  CHECK(again->exit.spawn_error.empty());
  CHECK(again->exit.exit_code == 6);
  CHECK(recorder.order(5) == std::vector<std::string>{"started", "exited"});
}

TEST_CASE("stop_all_and_wait: returns true once nothing is left, false when the timeout comes first") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({shell(1, "trap '' TERM; sleep 300")});
  CHECK(eventually([&] { return !descendants(*recorder.wait_started(1)).empty(); }));
  const auto start = std::chrono::steady_clock::now();
  // The grace period outlasts the wait: the TERM-ignoring worker is still there when the wait gives up.
  CHECK_FALSE(supervisor.stop_all_and_wait(1s, 100ms));
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(supervisor.running() == 1);
  CHECK(supervisor.stop_all_and_wait(0ms, 5s));
  CHECK(supervisor.running() == 0);
  CHECK(descendants(getpid()).empty());
  CHECK(recorder.wait_exit(1, 0ms)->exit.signal == SIGKILL);
}

TEST_CASE("destructor: kills everything below us, without events, in bounded time") {
  EventRecorder recorder;
  std::vector<pid_t> before;
  const auto start = std::chrono::steady_clock::now();
  {
    Supervisor supervisor(recorder.events());
    supervisor.spawn({shell(1, "trap '' TERM; setsid sleep 300 & echo a:$!; (sleep 300 & echo b:$!); sleep 300")});
    REQUIRE(recorder.wait_lines(1, 2));
    const pid_t worker = *recorder.wait_started(1);
    const pid_t keeper = parent_of(worker);
    const pid_t setsid_pid = printed_pid(recorder, 1, "a");
    const pid_t daemon_pid = printed_pid(recorder, 1, "b");
    CHECK(eventually([&] { return parent_of(daemon_pid) == keeper && session_of(setsid_pid) == setsid_pid; }));
    before = descendants(getpid());
    CHECK(before.size() >= 4);
    for (const pid_t pid : {keeper, worker, setsid_pid, daemon_pid}) {
      CHECK(std::find(before.begin(), before.end(), pid) != before.end());
    }
  }
  CHECK(std::chrono::steady_clock::now() - start < Supervisor::kShutdownTimeout);
  CHECK(descendants(getpid()).empty());
  for (const pid_t pid : before) CHECK_FALSE(exists(pid));
  CHECK_FALSE(recorder.wait_exit(1, 0ms));
}

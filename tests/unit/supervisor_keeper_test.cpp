// The keeper (agent/supervisor/keeper.h): a worker's whole tree dies with a SIGKILLed agent, the worker is reported
// exactly even when its keeper is killed, and the keeper is what it claims to be in ps.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agent/supervisor/keeper.h"
#include "agent/supervisor/testing/event_recorder.h"
#include "tests/unit/eventually.h"
#include "tests/unit/read_file.h"

using namespace dtrain::supervisor;
using namespace std::chrono_literals;
using dtrain::supervisor::testing::EventRecorder;
using dtrain::supervisor::testing::shell;
using dtrain::supervisor::testing::StopWaiter;

namespace {

// Zombies are dead: only their parent's reaping is missing.
bool alive(pid_t pid) {
  const auto stat = read_process_stat(pid);
  return stat && stat->state != 'Z';
}

pid_t parent_of(pid_t pid) {
  const auto stat = read_process_stat(pid);
  return stat ? stat->ppid : 0;
}

bool is_sleep(pid_t pid) { return read_file("/proc/" + std::to_string(pid) + "/cmdline").rfind("sleep", 0) == 0; }

// A stand-in for an agent: a forked process with a Supervisor of its own that runs `specs` and then waits to be
// killed. Returns its pid and its workers' pids (in spec order) once every worker started.
struct Agent {
  pid_t pid = 0;
  std::vector<pid_t> workers;
};
std::optional<Agent> start_agent(const std::vector<ProcessSpec>& specs) {
  int ready[2];
  if (pipe(ready) != 0) return std::nullopt;
  const pid_t agent = fork();
  if (agent < 0) return std::nullopt;
  if (agent == 0) {
    // Never returns into the test runner.
    close(ready[0]);
    try {
      prepare_process();  // the subreaper flag is not inherited through fork
      std::mutex mutex;
      std::vector<pid_t> workers(specs.size(), 0);
      Events events;
      events.started = [&](std::uint64_t id, pid_t pid) {
        std::lock_guard lock(mutex);
        workers.at(id - 1) = pid;
      };
      Supervisor supervisor(events);
      supervisor.spawn(specs);
      {
        std::lock_guard lock(mutex);
        const auto bytes = static_cast<ssize_t>(workers.size() * sizeof(pid_t));
        if (write(ready[1], workers.data(), static_cast<std::size_t>(bytes)) != bytes) _exit(1);
      }
      for (;;) pause();  // with the Supervisor alive
    } catch (...) {
      _exit(1);
    }
  }
  close(ready[1]);
  Agent out{agent, std::vector<pid_t>(specs.size(), 0)};
  pollfd readable{ready[0], POLLIN, 0};
  const auto bytes = static_cast<ssize_t>(specs.size() * sizeof(pid_t));
  const bool started = poll(&readable, 1, 10000) == 1 && read(ready[0], out.workers.data(), bytes) == bytes &&
                       std::none_of(out.workers.begin(), out.workers.end(), [](pid_t p) { return p == 0; });
  close(ready[0]);
  if (!started) {
    kill(agent, SIGKILL);
    waitpid(agent, nullptr, 0);
    return std::nullopt;
  }
  return out;
}

void kill_agent(const Agent& agent) {
  REQUIRE(agent.pid > 0);
  kill(agent.pid, SIGKILL);
  waitpid(agent.pid, nullptr, 0);
}

// Waits until none of `tree` is alive; true if that happened within `timeout`. Reaps the keepers in it, reparented to
// us (the test runner is a subreaper too); SIGKILLs survivors so that no test leaves them behind.
bool gone_within(const std::vector<pid_t>& tree, std::chrono::milliseconds timeout) {
  const bool gone = eventually([&] { return std::none_of(tree.begin(), tree.end(), alive); }, timeout);
  for (const pid_t pid : tree) {
    if (!gone) kill(pid, SIGKILL);
    if (parent_of(pid) == getpid()) waitpid(pid, nullptr, 0);
  }
  return gone;
}

std::vector<pid_t> sleeps_below(pid_t root) {
  std::vector<pid_t> out;
  for (const pid_t pid : descendants(root)) {
    if (alive(pid) && is_sleep(pid)) out.push_back(pid);
  }
  return out;
}

// A worker's keeper and everything below it.
std::vector<pid_t> keeper_tree(pid_t worker) {
  const pid_t keeper = parent_of(worker);
  std::vector<pid_t> tree = descendants(keeper);
  tree.push_back(keeper);
  return tree;
}

}  // namespace

TEST_CASE("keeper: a SIGKILLed agent takes its workers' whole trees with it (setsid, double fork, TERM ignored)") {
  const auto agent = start_agent({
      // A plain child, a setsid'd one, a double-forked one, and a TERM-ignoring worker.
      shell(1, "sleep 300 & setsid sleep 300 & (sleep 300 &); trap '' TERM; sleep 300"),
      // A new session that starts children of its own.
      shell(2, "setsid sh -c 'sleep 300 & sleep 300 & wait' & exec sleep 300"),
      // A wider tree: five double-forked shells with two sleeps each.
      shell(3, "for i in 1 2 3 4 5; do (sh -c 'sleep 300 & sleep 300 & wait' &); done; exec sleep 300"),
  });
  REQUIRE(agent);
  // 4 + 3 + 11 sleeps once every fork has happened.
  REQUIRE(eventually([&] { return sleeps_below(agent->pid).size() == 18; }, 10s));
  const std::vector<pid_t> tree = descendants(agent->pid);
  // Each worker's parent is its keeper, the agent's child, named for what it is; the double-forked processes
  // live on under the keeper, not under the agent.
  for (const pid_t worker : agent->workers) {
    const pid_t keeper = parent_of(worker);
    CHECK(parent_of(keeper) == agent->pid);
    CHECK(read_file("/proc/" + std::to_string(keeper) + "/comm") == "dtrain-keeper\n");
  }
  std::size_t children_of_agent = 0;
  for (const pid_t pid : tree) children_of_agent += parent_of(pid) == agent->pid ? 1 : 0;
  CHECK(children_of_agent == 3);
  CHECK(tree.size() >= 3 + 18);

  const auto killed_at = std::chrono::steady_clock::now();
  kill_agent(*agent);
  CHECK(gone_within(tree, 5s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at);
  MESSAGE("a tree of " << tree.size() << " processes gone " << took.count() << " ms after SIGKILL to its agent");
}

TEST_CASE("keeper: a parent_death_signal other than SIGKILL reaches the worker first, the rest dies with it") {
  const auto dir = std::filesystem::temp_directory_path() / ("dtrain-keeper-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string mark = (dir / "term").string();
  // Catches TERM (dash's wait returns for a trapped signal) and leaves two children that would outlive it.
  ProcessSpec polite = shell(1, "trap 'echo got-term > " + mark + "; exit 0' TERM; setsid sleep 300 & sleep 300 & wait");
  polite.parent_death_signal = SIGTERM;
  polite.orphan_grace = 60s;  // far beyond the bound below: the tree must go when the worker goes
  // Ignores TERM: gets its orphan_grace, then SIGKILL with its tree.
  ProcessSpec stubborn = shell(2, "trap '' TERM; sleep 300 & exec sleep 300");
  stubborn.parent_death_signal = SIGTERM;
  stubborn.orphan_grace = 1500ms;
  const auto agent = start_agent({polite, stubborn});
  REQUIRE(agent);
  REQUIRE(eventually([&] { return sleeps_below(agent->pid).size() == 4; }, 10s));
  const std::vector<pid_t> polite_tree = keeper_tree(agent->workers[0]);
  const std::vector<pid_t> stubborn_tree = keeper_tree(agent->workers[1]);
  REQUIRE(polite_tree.size() == 4);
  REQUIRE(stubborn_tree.size() == 3);

  const auto killed_at = std::chrono::steady_clock::now();
  kill_agent(*agent);
  CHECK(gone_within(polite_tree, 5s));
  CHECK(read_file(mark) == "got-term\n");
  usleep(300'000);
  const bool in_grace = std::chrono::steady_clock::now() - killed_at < 1500ms;
  if (in_grace) CHECK(std::all_of(stubborn_tree.begin(), stubborn_tree.end(), alive));
  CHECK(gone_within(stubborn_tree, 6s));
  CHECK(std::chrono::steady_clock::now() - killed_at >= 1500ms);
  std::filesystem::remove_all(dir);
}

TEST_CASE("keeper: the worker's pid is its own; the keeper reads as dtrain-keeper, in a group of its own") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({shell(1, "exec sleep 300")});
  const auto worker = recorder.wait_started(1);
  REQUIRE(worker);
  CHECK(eventually([&] { return read_file("/proc/" + std::to_string(*worker) + "/cmdline") == std::string("sleep\0" "300\0", 10); }));
  const pid_t keeper = parent_of(*worker);
  CHECK(parent_of(keeper) == getpid());
  CHECK(read_process_stat(keeper)->pgid == keeper);
  CHECK(read_process_stat(*worker)->pgid == *worker);
  CHECK(read_file("/proc/" + std::to_string(keeper) + "/comm") == "dtrain-keeper\n");
  // Not our command line (a `pkill -f` aimed at the agent must not hit it): the name, then NUL padding.
  const std::string cmdline = read_file("/proc/" + std::to_string(keeper) + "/cmdline");
  CHECK(cmdline.rfind(std::string("dtrain-keeper\0", 14), 0) == 0);
  CHECK(cmdline.find_first_not_of('\0', 14) == std::string::npos);
  // It holds nothing of ours: stdio is /dev/null and only the record pipe is open.
  std::vector<std::string> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(keeper) + "/fd")) {
    fds.push_back(entry.path().filename().string() + "->" + std::filesystem::read_symlink(entry.path()).string());
  }
  std::sort(fds.begin(), fds.end());
  REQUIRE(fds.size() == 4);
  CHECK(fds[0] == "0->/dev/null");
  CHECK(fds[1] == "1->/dev/null");
  CHECK(fds[2] == "2->/dev/null");
  CHECK(fds[3].rfind("3->pipe:", 0) == 0);
  kill(*worker, SIGKILL);
  REQUIRE(recorder.wait_exit(1));
  // The keeper exits once its tree is empty, and we reap it.
  CHECK(eventually([&] { return descendants(getpid()).empty(); }));
}

TEST_CASE("keeper: exit codes stay exact when the keeper itself is killed") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  // The worker outlives its keeper (no parent-death signal), becomes our child and exits with 5 later.
  ProcessSpec survivor = shell(1, "sleep 1; exit 5");
  survivor.parent_death_signal = 0;
  // The worker dies of its parent-death signal with the keeper.
  ProcessSpec follower = shell(2, "exec sleep 300");
  supervisor.spawn({survivor, follower});
  const auto survivor_pid = recorder.wait_started(1);
  const auto follower_pid = recorder.wait_started(2);
  REQUIRE(survivor_pid);
  REQUIRE(follower_pid);
  kill(parent_of(*survivor_pid), SIGKILL);
  kill(parent_of(*follower_pid), SIGKILL);
  const auto followed = recorder.wait_exit(2);
  REQUIRE(followed);
  CHECK(followed->exit.signal == SIGKILL);
  CHECK(followed->exit.pid == *follower_pid);
  CHECK(eventually([&] { return parent_of(*survivor_pid) == getpid(); }));
  const auto survived = recorder.wait_exit(1);
  REQUIRE(survived);
  CHECK(survived->exit.exit_code == 5);
  CHECK(survived->exit.signal == 0);
  CHECK(survived->exit.pid == *survivor_pid);
  CHECK(supervisor.running() == 0);
  CHECK(eventually([&] { return descendants(getpid()).empty(); }));
}

TEST_CASE("keeper: a stray SIGUSR1 (its wake-up signal) or SIGTERM from another process changes nothing") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  supervisor.spawn({shell(1, "sleep 300 & exec sleep 300")});
  const auto worker = recorder.wait_started(1);
  REQUIRE(worker);
  const pid_t keeper = parent_of(*worker);
  // Sent by another process (a worker of ours), as a user's `kill` would be.
  const std::string target = std::to_string(keeper);
  supervisor.spawn({shell(2, "kill -USR1 " + target + "; kill -TERM " + target + "; kill -INT " + target)});
  const auto sender = recorder.wait_exit(2);
  REQUIRE(sender);
  CHECK(sender->exit.exit_code == 0);
  usleep(200'000);
  CHECK(alive(keeper));
  CHECK(alive(*worker));
  CHECK(descendants(keeper).size() == 2);
  StopWaiter waiter;
  supervisor.stop_all(1s, waiter.callback());
  const auto result = waiter.wait();
  REQUIRE(result);
  CHECK(result->at(0) == 0);  // the keeper needed no SIGKILL, nor did the tree
  CHECK(recorder.wait_exit(1, 0ms)->exit.signal == SIGTERM);
  CHECK(descendants(getpid()).empty());
}

TEST_CASE("keeper: a worker whose exec fails leaves no keeper behind") {
  EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec missing_dir = shell(1, "exit 0");
  missing_dir.working_dir = "/nonexistent-dtrain-dir";
  supervisor.spawn({missing_dir});
  const auto exit = recorder.wait_exit(1, 0ms);
  REQUIRE(exit);
  CHECK(exit->exit.spawn_error.find("cannot change to working directory") == 0);
  CHECK(exit->exit.pid > 0);
  CHECK(eventually([&] { return descendants(getpid()).empty(); }));
}

TEST_CASE("keeper: signal_children reaches every child of the caller, and nothing else") {
  // No Supervisor exists here, so the children stay ours to reap.
  pid_t children[2];
  for (pid_t& child : children) {
    child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  CHECK(signal_children(0) >= 2);  // 0: only checks they can be signalled
  CHECK(signal_children(SIGTERM) >= 2);
  for (const pid_t child : children) {
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGTERM);
  }
  CHECK(signal_children(0) == 0);
}

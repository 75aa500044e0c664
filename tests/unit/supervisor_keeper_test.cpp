// The keeper (agent/supervisor/process/keeper.h): a worker's whole tree dies with a SIGKILLed agent, the worker is reported
// exactly even when its keeper is killed, and the keeper is what it claims to be in ps.
#include <doctest/doctest.h>

#include <linux/capability.h>
#include <poll.h>
#include <sys/prctl.h>
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

#include "agent/supervisor/process/keeper.h"
#include "agent/supervisor/process/pid_namespace.h"
#include "agent/supervisor/testing/event_recorder.h"
#include "tests/unit/eventually.h"
#include "tests/unit/read_file.h"
#include "tests/unit/parent_of.h"

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

bool is_sleep(pid_t pid) { return read_file("/proc/" + std::to_string(pid) + "/cmdline").rfind("sleep", 0) == 0; }

// A stand-in for an agent: a forked process with a Supervisor of its own that runs `specs` and then waits to be
// killed. Returns its pid and its workers' pids (in spec order) once every worker started.
struct Agent {
  pid_t pid = 0;
  std::vector<pid_t> workers;
};
std::optional<Agent> start_agent(const std::vector<ProcessSpec>& specs, Options options = {}) {
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
      Supervisor supervisor(events, options);
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

// Waits until none of `tree` is alive; true if that happened within `timeout`. Reaps what of it is reparented to
// us as it dies (the test runner is a subreaper too), without blocking: the init of a PID namespace ends only once
// every process of it was reaped, some of them by us. SIGKILLs survivors so that no test leaves them behind.
bool gone_within(const std::vector<pid_t>& tree, std::chrono::milliseconds timeout) {
  const auto reaped_and_gone = [&] {
    for (const pid_t pid : tree) {
      if (parent_of(pid) == getpid()) waitpid(pid, nullptr, WNOHANG);
    }
    return std::none_of(tree.begin(), tree.end(), alive);
  };
  const bool gone = eventually(reaped_and_gone, timeout);
  if (!gone) {
    for (const pid_t pid : tree) kill(pid, SIGKILL);
    eventually(reaped_and_gone, 5s);
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
  // Until a child has exec'd sleep it is a copy of this test process, whose crash handler would report the SIGTERM
  // as this test crashing.
  for (const pid_t child : children)
    CHECK(eventually([&] { return is_sleep(child); }));
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

namespace {

bool is_root() { return geteuid() == 0; }

std::string command_of(pid_t pid) { return read_file("/proc/" + std::to_string(pid) + "/comm"); }

}  // namespace

TEST_CASE("pid namespace: nothing of the trees survives a SIGKILL of the agent, its keepers and the holder at once") {
  if (!is_root()) {
    MESSAGE("SKIPPED: a PID namespace needs CAP_SYS_ADMIN (run as root)");
    return;
  }
  Options contained;
  contained.pid_namespace = true;
  // A new session with children, a double fork, and a setsid'd double fork: what the keepers cannot hold once
  // they are killed too (`pkill -9 dtrain`).
  const std::string tree_script =
      "setsid sh -c 'sleep 300 & sleep 300 & wait' & (sleep 300 &); (setsid sh -c '(sleep 300 &); sleep 300' &); "
      "exec sleep 300";
  const auto agent = start_agent({shell(1, tree_script), shell(2, tree_script)}, contained);
  REQUIRE(agent);
  REQUIRE(eventually([&] { return sleeps_below(agent->pid).size() == 12; }, 10s));
  const std::vector<pid_t> tree = descendants(agent->pid);
  std::vector<pid_t> dtrain_processes{agent->pid};
  std::size_t holders = 0;
  for (const pid_t pid : tree) {
    const std::string comm = command_of(pid);
    if (comm == "dtrain-keeper\n" || comm == "dtrain-pidns\n") dtrain_processes.push_back(pid);
    holders += comm == "dtrain-pidns\n" ? 1 : 0;
  }
  CHECK(holders == 1);
  CHECK(dtrain_processes.size() == 1 + 2 + 1);

  const auto killed_at = std::chrono::steady_clock::now();
  for (const pid_t pid : dtrain_processes) kill(pid, SIGKILL);
  waitpid(agent->pid, nullptr, 0);
  CHECK(gone_within(tree, 3s));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at);
  MESSAGE("a tree of " << tree.size() << " processes gone " << took.count()
                       << " ms after SIGKILL to every dtrain process at once");
}

TEST_CASE("pid namespace: workers share one, with its own /proc; events, stops and exits speak host pids; a stop "
          "that empties it ends it") {
  if (!is_root()) {
    MESSAGE("SKIPPED: a PID namespace needs CAP_SYS_ADMIN (run as root)");
    return;
  }
  EventRecorder recorder;
  Options contained;
  contained.pid_namespace = true;
  Supervisor supervisor(recorder.events(), contained);
  CHECK(supervisor.containment() == "keepers and a PID namespace");
  // $$ is the shell's getpid(); /proc/$$/stat's first field is the same number only when /proc is the namespace's.
  const std::string report = "read -r self rest < /proc/$$/stat; echo \"inside:$$:$self\"; ";
  supervisor.spawn({shell(1, report + "setsid sleep 300 & sleep 300"), shell(2, report + "exec sleep 300")});
  REQUIRE(recorder.wait_lines(1, 1));
  REQUIRE(recorder.wait_lines(2, 1));
  const pid_t worker1 = *recorder.wait_started(1);
  const pid_t worker2 = *recorder.wait_started(2);
  std::vector<pid_t> inside;
  for (const std::uint64_t id : {1, 2}) {
    const std::string line = recorder.texts(id, false).at(0);
    CAPTURE(line);
    REQUIRE(line.rfind("inside:", 0) == 0);
    const auto colon = line.find(':', 7);
    const std::string pid = line.substr(7, colon - 7);
    CHECK(pid == line.substr(colon + 1));
    inside.push_back(std::stoi(pid));
  }
  // One namespace for both: their pids there are distinct, and neither is the host pid the events give.
  CHECK(inside[0] != inside[1]);
  CHECK(inside[0] != worker1);
  CHECK(inside[1] != worker2);
  CHECK(parent_of(parent_of(worker1)) == getpid());
  CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(worker1) + "/ns/pid") !=
        std::filesystem::read_symlink("/proc/self/ns/pid"));

  // A stop that leaves the namespace empty ends it: nothing of ours is left, not even the holder. The next spawn
  // makes a new one.
  StopWaiter waiter;
  supervisor.stop_all(300ms, waiter.callback());
  REQUIRE(waiter.wait());
  CHECK(eventually([] {
    const auto left = descendants(getpid());
    return std::none_of(left.begin(), left.end(), alive);
  }));
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  CHECK(exit->exit.pid == worker1);
  supervisor.spawn({shell(3, report + "exit 7")});
  const auto third = recorder.wait_exit(3);
  REQUIRE(third);
  CHECK(third->exit.exit_code == 7);
  REQUIRE(recorder.wait_lines(3, 1));
  CHECK(recorder.texts(3, false).at(0).rfind("inside:", 0) == 0);
}

TEST_CASE("pid namespace: without CAP_SYS_ADMIN the workers run as before, and containment() says what that means") {
  if (!is_root()) {
    MESSAGE("SKIPPED: dropping CAP_SYS_ADMIN is tested from root");
    return;
  }
  int result[2];
  REQUIRE(pipe(result) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(result[0]);
    // A process without CAP_SYS_ADMIN in its bounding and effective sets, as a non-root agent is.
    const bool dropped = prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) == 0 && setgid(65534) == 0 && setuid(65534) == 0;
    std::string text = "not dropped";
    if (dropped) {
      const auto made = create_pid_namespace();
      text = made.ok() ? "made" : std::to_string(static_cast<int>(made.status.code())) + ":" + made.status.message();
    }
    [[maybe_unused]] const ssize_t n = write(result[1], text.data(), text.size());
    _exit(0);
  }
  close(result[1]);
  std::string text;
  char buf[1024];
  for (ssize_t n; (n = read(result[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(result[0]);
  waitpid(child, nullptr, 0);
  CAPTURE(text);
  CHECK(text.rfind(std::to_string(static_cast<int>(dtrain::StatusCode::permission_denied)) + ":", 0) == 0);
  CHECK(text.find("CAP_SYS_ADMIN") != std::string::npos);
  CHECK(text.find("survive") != std::string::npos);
}

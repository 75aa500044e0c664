#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "agent/supervisor/process_tree.h"
#include "agent/supervisor/testing/event_recorder.h"
#include "tests/unit/parent_of.h"

using namespace dtrain::supervisor;

namespace {

bool contains(const std::vector<pid_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

}  // namespace

TEST_CASE("process tree: read_process_stat sees ourselves and not a reaped child") {
  const auto self = read_process_stat(getpid());
  REQUIRE(self);
  CHECK(self->ppid == getppid());
  CHECK(self->pgid == getpgrp());
  CHECK(self->sid == getsid(0));
  CHECK(self->state == 'R');

  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_FALSE(read_process_stat(child));
}

TEST_CASE("process tree: an unreaped zombie is still a descendant") {
  // No Supervisor exists here, so nothing reaps the child before we do.
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  REQUIRE(zombie > 0);
  siginfo_t info{};
  REQUIRE(waitid(P_PID, static_cast<id_t>(zombie), &info, WEXITED | WNOWAIT) == 0);  // exited, left unreaped
  CHECK(read_process_stat(zombie)->state == 'Z');
  CHECK(contains(descendants(getpid()), zombie));
  CHECK(contains(descendants_from_stat(getpid()), zombie));
  CHECK(signal_descendants(getpid(), SIGKILL).zombies >= 1);
  int status = 0;
  REQUIRE(waitpid(zombie, &status, 0) == zombie);
  CHECK_FALSE(contains(descendants(getpid()), zombie));
}

TEST_CASE("process tree: descendants lists children and reparented grandchildren, and not the root") {
  testing::EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec spec;
  spec.id = 1;
  spec.argv = {"sh", "-c", "sleep 300 & echo $!; exit 0"};
  supervisor.spawn({spec});
  const auto exit = recorder.wait_exit(1);
  REQUIRE(exit);
  REQUIRE(recorder.wait_lines(1, 1));
  const pid_t grandchild = std::stoi(recorder.texts(1, false).at(0));

  // The shell exited: its child was reparented to the shell's keeper (the subreaper of its tree, our child), and
  // the keeper reaps the shell right after reporting its exit.
  for (int i = 0; i < 5000 && contains(descendants(getpid()), exit->exit.pid); ++i) usleep(1000);
  const auto tree = descendants(getpid());
  CHECK(contains(tree, grandchild));
  CHECK_FALSE(contains(tree, exit->exit.pid));
  CHECK_FALSE(contains(tree, getpid()));
  const pid_t keeper = parent_of(grandchild);
  CHECK(contains(tree, keeper));
  CHECK(parent_of(keeper) == getpid());

  // The /proc/*/stat fallback agrees with the children files (both include the zombie-free tree here).
  auto from_stat = descendants_from_stat(getpid());
  auto from_children = descendants(getpid());
  std::sort(from_stat.begin(), from_stat.end());
  std::sort(from_children.begin(), from_children.end());
  CHECK(from_stat == from_children);
  CHECK(contains(from_stat, grandchild));

  const auto signalled = signal_descendants(getpid(), SIGKILL, {keeper});
  CHECK(contains(signalled.signalled, grandchild));
  CHECK_FALSE(contains(signalled.signalled, keeper));
}

TEST_CASE("process tree: signal_descendants skips the listed pids and groups") {
  testing::EventRecorder recorder;
  Supervisor supervisor(recorder.events());
  ProcessSpec a, b;
  a.id = 1;
  a.argv = {"sleep", "300"};
  b.id = 2;
  b.argv = {"sleep", "300"};
  supervisor.spawn({a, b});
  const auto pid_a = recorder.wait_started(1);
  const auto pid_b = recorder.wait_started(2);
  REQUIRE(pid_a);
  REQUIRE(pid_b);
  // Each worker leads its own process group; its keeper (our child, its parent) has another one.
  CHECK(read_process_stat(*pid_a)->pgid == *pid_a);
  const pid_t keeper_a = parent_of(*pid_a);
  const pid_t keeper_b = parent_of(*pid_b);
  CHECK(parent_of(keeper_a) == getpid());
  CHECK(read_process_stat(keeper_a)->pgid == keeper_a);

  const auto none = signal_descendants(getpid(), SIGTERM, {*pid_a, keeper_a, keeper_b}, {*pid_b});
  CHECK(none.found >= 4);
  CHECK(none.signalled.empty());

  const auto only_b = signal_descendants(getpid(), SIGTERM, {*pid_a, keeper_a, keeper_b});
  CHECK(only_b.signalled == std::vector<pid_t>{*pid_b});
  const auto exit_b = recorder.wait_exit(2);
  REQUIRE(exit_b);
  CHECK(exit_b->exit.signal == SIGTERM);
  CHECK(supervisor.running() == 1);
}

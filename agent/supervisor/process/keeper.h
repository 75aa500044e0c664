#pragma once
// The keeper: one small process per worker, between the agent and the worker, that holds the worker's whole
// process tree so that the tree dies with the agent even when the agent is SIGKILLed.
//
//   agent (subreaper) ── keeper (subreaper, own process group) ── worker (own process group) ── its descendants
//
// Why: a parent-death signal reaches only a direct child, so a SIGKILLed agent used to leave every grandchild of
// its workers running under init (a `sh -c 'sleep 300'` worker's sleep, a setsid'd or double-forked daemon).
// The keeper is the child subreaper of its subtree: every process the worker starts stays its descendant whatever
// it does (setsid, double fork), and the keeper's parent-death signal tells it when the agent is gone. It then
// does what the parent-death signal would have done to the worker, and SIGKILLs the rest of the tree:
//   * parent_death_signal SIGKILL (agents' workers) or 0: SIGKILL to the worker and every descendant at once;
//   * any other signal (SIGTERM: the agents a launcher starts): that signal to the worker, which gets
//     orphan_grace to end on its own (an agent stops its workers gracefully), then SIGKILL to whatever is left.
// The keeper needs no privilege, no cgroup and nothing outside this process: it is a fork of the agent that never
// execs and runs only async-signal-safe code (the agent has many threads; only the forking one exists in the fork).
//
// It also reports the worker's exit to the agent, which cannot waitpid() a grandchild: one record per event on a
// pipe, written before the worker is reaped, so a keeper killed at any moment loses nothing (an unreported worker,
// dead or alive, is reparented to the agent, which reaps it itself). The keeper ignores every signal but SIGKILL
// (all are blocked) and exits by itself once the worker was reported and no descendant is left.
//
// Costs per worker (scripts/bench/keeper_cost.sh): one more fork, and one more process whose memory is the agent's
// pages shared copy-on-write (its own pages: a stack, page tables and the few pages it writes).

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>

namespace dtrain::supervisor {

// The parent-death signal of the keeper itself (its wake-up when the supervisor thread or the agent is gone). It is
// only a wake-up: the keeper acts when its parent changed or the signal came from the agent, so a stray SIGUSR1
// from anyone else does nothing.
inline constexpr int kKeeperOrphanSignal = SIGUSR1;
// While killing the tree, how often the keeper rescans even if no child exits (a process in uninterruptible sleep
// dies late; an orphan reparented to the keeper sends no signal).
inline constexpr std::chrono::milliseconds kKeeperKillRescan{100};

// One record on the keeper's pipe to the agent; a single write() of at most PIPE_BUF bytes, so never torn.
struct KeeperRecord {
  enum Kind : std::int32_t {
    kWorkerForked = 1,  // pid: the worker, in its own process group; the first record of every keeper
    kSetupFailed = 2,   // code: kStepSetup or kStepFork; value: errno; nothing was started
    kWorkerExited = 3,  // pid: the worker; code: CLD_EXITED / CLD_KILLED / CLD_DUMPED; value: status or signal
  };
  enum Step : std::int32_t { kStepSetup = 1, kStepFork = 2 };  // which part of kSetupFailed failed
  std::int32_t kind = 0;
  std::int32_t pid = 0;
  std::int32_t code = 0;
  std::int32_t value = 0;
};

// What a keeper needs after it has forked its worker.
struct KeeperPlan {
  pid_t agent = 0;                        // the supervising process; the keeper is orphaned when it is gone
  int parent_death_signal = 0;            // ProcessSpec::parent_death_signal
  std::chrono::milliseconds orphan_grace{0};  // ProcessSpec::orphan_grace
  int status_fd = -1;                     // write end of the record pipe
};

// In a freshly forked keeper, before it forks the worker: own process group (a signal to the agent's or the
// worker's group does not reach it), the name "dtrain-keeper" in ps and /proc/<pid>/cmdline (so `pkill -f "dtrain
// agent"` does not hit it), child subreaper, parent-death signal. Returns 0, or the errno of the step that failed;
// ESRCH when the agent died before the parent-death signal was armed (nothing would ever wake the keeper).
int become_keeper(pid_t agent);

// The keeper's life after it forked `worker` and reported it: reports the worker's exit, reaps every orphan of the
// tree, ends the tree when the agent is gone, and exits once nothing is left. Async-signal-safe throughout.
[[noreturn]] void keep(pid_t worker, const KeeperPlan& plan);

// Names the calling process `name` in ps, pgrep and /proc/<pid>/{comm,cmdline} (its argv area is overwritten: our
// private copy-on-write page of the agent's). For the agent's own forks that never exec. Async-signal-safe.
void name_process(const char* name);

// Sends `sig` to every child of the calling process, from /proc/*/stat (this kernel family may lack
// /proc/<pid>/task/<tid>/children). Safe against pid reuse: a child's pid cannot be reused before its parent reaps
// it. Async-signal-safe (no allocation; one static buffer, so not for two threads at once). Returns how many
// children were signalled.
std::size_t signal_children(int sig);

}  // namespace dtrain::supervisor

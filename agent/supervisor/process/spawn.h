#pragma once
// Fork + exec of one worker: everything the child needs is prepared before fork, so the child runs only
// async-signal-safe calls (the agent has many threads; after fork only the forking one exists in the child).

#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agent/supervisor/process/process_spec.h"
#include "common/status.h"

namespace dtrain::supervisor {

// A ProcessSpec turned into the exact bytes execve and the child setup need.
struct LaunchPlan {
  std::string program;              // path handed to execve (resolved through PATH when argv[0] has no '/')
  std::vector<std::string> argv;    // as given
  std::vector<std::string> env;     // "KEY=value": our environment overlaid with spec.env
  std::string working_dir;          // "" = stay
  std::vector<unsigned> cpus;       // for messages; the mask below is what the child applies
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpu_mask{nullptr, nullptr};  // null = inherit
  std::size_t cpu_mask_size = 0;    // bytes, for sched_setaffinity
  int parent_death_signal = 0;      // 0 = none
  std::chrono::milliseconds orphan_grace{0};  // ProcessSpec::orphan_grace, for the keeper
  // The supervisor's PID namespace (pid_namespace.h), or -1: the keeper joins pid_ns before it forks the worker,
  // the worker joins mnt_ns (its /proc) before it changes to working_dir, which is then never empty.
  int pid_ns = -1;
  int mnt_ns = -1;
};

// Builds the plan, or fails with the spawn error the user reads: invalid_argument (empty argv, bad env name, bad
// cpu), or search_path's failure.
Result<LaunchPlan> plan_launch(const ProcessSpec& spec);

// Looks `name` (no '/') up in the ':'-separated `path_var`; relative entries are taken from `working_dir` (or ours).
// Returns the path to exec, or fails with not_found (no match) or permission_denied (only non-executable matches),
// saying which PATH was searched.
Result<std::string> search_path(const std::string& name, const std::string& path_var, const std::string& working_dir);

// How long await_keeper() waits for the keeper to report the worker's pid (it forks at once; only a machine out of
// processes or memory makes it slow).
inline constexpr std::chrono::seconds kKeeperReportTimeout{5};

// A started worker and its keeper (see keeper.h); the descriptors are the parent's (read) ends, close-on-exec,
// all non-blocking but report_fd.
struct LaunchedChild {
  pid_t pid = 0;       // the worker (a child of the keeper)
  pid_t keeper = 0;    // our child
  int stdout_fd = -1;
  int stderr_fd = -1;
  int report_fd = -1;  // EOF when exec succeeded; a failure record when the child setup or exec failed
  int keeper_fd = -1;  // KeeperRecords after kWorkerForked (already read): kWorkerExited; EOF when the keeper is gone
};

// A keeper forked by fork_keeper whose first record was not read yet: the parent's (read) ends, close-on-exec.
struct ForkedKeeper {
  pid_t keeper = 0;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int report_fd = -1;
  int keeper_fd = -1;
};

// Forks the keeper, which forks the worker, sets it up (own process group, parent-death signal, cpu binding, stdin
// from /dev/null, stdout/stderr to pipes, every other descriptor closed at exec, working dir, default signal
// dispositions, empty signal mask) and execs it. Returns at once after the fork, so that a caller starting many
// workers forks every keeper before it waits for the first (they then set up and exec their workers in parallel).
// Fails with internal when a pipe, /dev/null or the fork cannot be had (the message carries errno's text).
Result<ForkedKeeper> fork_keeper(const LaunchPlan& plan);
// Waits (at most kKeeperReportTimeout) for the keeper's first record. Returns the pair once the keeper reported the
// worker's pid, or fails when no worker could be created (the keeper is then SIGKILLed and the descriptors are
// closed; the caller still reaps it): deadline_exceeded when the keeper did not report in time, internal otherwise.
Result<LaunchedChild> await_keeper(const ForkedKeeper& forked, const LaunchPlan& plan);

// What the report pipe said.
struct ExecReport {
  enum class Outcome { kExecuted, kFailed, kUndecided } outcome;  // kUndecided: nothing yet within the timeout
  std::string error;                                              // kFailed: the spawn error for the user
};
// Waits up to `timeout` for the child to exec or report a failure. Does not close report_fd.
ExecReport await_exec(int report_fd, const LaunchPlan& plan, std::chrono::milliseconds timeout);

}  // namespace dtrain::supervisor

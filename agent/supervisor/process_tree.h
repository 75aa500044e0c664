#pragma once
// The tree of processes below a pid, read from /proc, and signalling it without hitting a recycled pid.

#include <sys/types.h>

#include <optional>
#include <set>
#include <vector>

#include "common/os/proc_stat.h"

namespace dtrain::supervisor {

// Every descendant of `root` (children of each of its threads, their children, ...), zombies included, in
// breadth-first order; `root` itself is not listed. A snapshot: processes may fork or exit while it is read, so
// callers that need "nothing left" repeat it.
// Reads /proc/<pid>/task/<tid>/children; on kernels built without them (CONFIG_PROC_CHILDREN) it falls back to
// descendants_from_stat.
std::vector<pid_t> descendants(pid_t root);
// The same from every /proc/<pid>/stat's parent field: slower (reads all processes), works on any kernel.
std::vector<pid_t> descendants_from_stat(pid_t root);

// What /proc/<pid>/stat says about a process (its state, parent, group, session); std::nullopt when the process does
// not exist (any more).
std::optional<ProcStat> read_process_stat(pid_t pid);

// Result of signal_descendants.
struct SignalledProcesses {
  std::size_t found = 0;         // descendants the scan saw, of any state (0: the tree was empty)
  std::vector<pid_t> signalled;  // living (non-zombie) processes the signal was delivered to
  std::size_t zombies = 0;       // descendants found already dead but not yet reaped by their parent
};
// Sends `sig` to every living descendant of `root` except those in `skip` or in a process group in `skip_groups`.
// Each pid is pinned with a pidfd and re-checked (still alive, parent still inside the tree) before the signal goes
// out through that pidfd, so a pid recycled by an unrelated process between the scan and the signal is never hit.
// `then` (0: none) follows `sig` through the same pidfd: SIGCONT after SIGTERM, so that a stopped process (SIGSTOP,
// a job-control stop, a tracer that died) runs its handler now instead of when the grace period is over.
SignalledProcesses signal_descendants(pid_t root, int sig, const std::set<pid_t>& skip = {},
                                      const std::set<pid_t>& skip_groups = {}, int then = 0);

}  // namespace dtrain::supervisor

#pragma once

// What /proc/PID/stat (or a thread's /proc/PID/task/TID/stat) says about a process: the one parser of that line.
// The process tree (parents, groups, zombies), the worker sampler (CPU time, state, threads), the session socket's
// ancestor walk and the hang evidence (each thread's state) all read it through here.
//
// The line is "pid (comm) state ppid pgrp session ... utime stime ... num_threads ...". comm is whatever the process
// named itself (prctl(PR_SET_NAME), the executable's name) and may hold spaces and parentheses, "a) (b" included,
// so the fields are counted from the LAST ')'. Fields are numbered as in proc(5), from 1, with comm as field 2.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dtrain {

// The fields of a stat line that dtrain reads.
struct ProcStat {
  pid_t pid = 0;                // field 1
  char state = '?';             // field 3: R running, S sleeping, D uninterruptible, T stopped, Z zombie, X dead, ...
  pid_t ppid = 0;               // field 4: the parent (0 for pid 1 and kernel threads)
  pid_t pgid = 0;               // field 5 (proc(5): pgrp): the process group
  pid_t sid = 0;                // field 6 (proc(5): session): the session
  std::uint64_t utime = 0;      // field 14: user CPU time, in clock ticks (sysconf(_SC_CLK_TCK) per second)
  std::uint64_t stime = 0;      // field 15: system CPU time, in clock ticks
  unsigned num_threads = 0;     // field 20
};

// Parses the text of a stat line (a trailing '\n' is fine). invalid_argument, naming what is wrong, when it is not
// one: no pid before the command name, no ')' after it, fewer fields than num_threads, a state that is not one
// character, or a number that is not one.
Result<ProcStat> parse_proc_stat(std::string_view line);

// Reads and parses /proc/<pid>/stat. not_found (with the reason the read failed) when it cannot be read: the process
// is gone, or was never there.
Result<ProcStat> read_proc_stat(pid_t pid);
// The same for a stat file named by its path (a thread's: /proc/<pid>/task/<tid>/stat).
Result<ProcStat> read_proc_stat_file(const std::string& path);

}  // namespace dtrain

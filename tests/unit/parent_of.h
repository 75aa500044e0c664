#pragma once
// Test support: a process's parent pid, from /proc (0 once it is gone).

#include <sys/types.h>

#include "agent/supervisor/process_tree.h"

inline pid_t parent_of(pid_t pid) {
  const auto stat = dtrain::supervisor::read_process_stat(pid);
  return stat ? stat->ppid : 0;
}

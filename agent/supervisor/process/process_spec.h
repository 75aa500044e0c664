#pragma once
// What the supervisor runs (ProcessSpec) and how it ended (ProcessExit).

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain::supervisor {

// One worker process to start.
struct ProcessSpec {
  std::uint64_t id = 0;                    // caller's handle (the rank); echoed in every event about this process
  std::vector<std::string> argv;           // argv[0] without '/' is resolved through PATH (the PATH in `env`, else
                                           // ours; an empty entry means the working directory); never a shell
  std::map<std::string, std::string> env;  // set on top of this process's environment (these win)
  std::string working_dir;                 // chdir here before exec; empty = ours
  std::vector<unsigned> cpus;              // sched_setaffinity in the child; empty = inherit ours
  std::string log_path;                    // stdout and stderr appended here byte for byte (see OutputCapture);
                                           // parent dirs created; "" = no file
  int parent_death_signal = SIGKILL;       // what the worker gets when the supervisor is gone (the process was
                                           // killed or the Supervisor destroyed): sent by the worker's keeper
                                           // (keeper.h), which then SIGKILLs every descendant; 0 = no signal of
                                           // its own, the keeper SIGKILLs the whole tree
  std::chrono::milliseconds orphan_grace{30000};  // after a parent_death_signal other than SIGKILL: how long the
                                           // worker may take to end on its own before the keeper SIGKILLs it and
                                           // whatever remains of its tree
  std::size_t stderr_tail_lines = 20;      // how many last stderr lines ProcessExit keeps
};

// How a worker ended (or why it never ran).
struct ProcessExit {
  std::uint64_t id = 0;                     // ProcessSpec::id
  pid_t pid = 0;                            // 0 when no process was created
  int exit_code = 0;                        // exit status when signal == 0; 128 + signal when killed by one (the
                                            // shell convention); 127 when it never ran (spawn_error set); -1 when
                                            // its status was lost (another waitpid in this process reaped it)
  int signal = 0;                           // terminating signal, 0 for a normal exit
  bool stopped = false;                     // ended while stop_all was in progress (we asked it to end)
  std::chrono::milliseconds runtime{0};     // from fork to reap
  std::vector<std::string> stderr_tail;     // last ProcessSpec::stderr_tail_lines stderr lines, oldest first
  std::string spawn_error;                  // non-empty: never ran, e.g. "cannot execute 'foo': No such file or
                                            // directory (PATH=/usr/bin:/bin)"
  std::string log_error;                    // non-empty when writing the log file failed (why, and which file)
  std::uint64_t log_bytes_lost = 0;         // output bytes that did not reach the log file after log_error
};

}  // namespace dtrain::supervisor

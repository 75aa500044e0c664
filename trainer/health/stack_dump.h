#pragma once

// dtrain-trainer's own evidence when a rank hangs (the launcher's health checks, agent/job/evidence.h): on a signal the
// agent sends only to a worker that announced it (the dump_signal of its health reports), the trainer appends to
// DTRAIN_STACKS_FILE what gdb cannot tell: the phase the training thread is in (phase.h) and the last collectives
// of every communicator with their sequence numbers (trainer/comm/trace.h), so the launcher can name the rank that
// never entered a collective the others wait in:
//
//   dtrain-trainer pid 4242: phase "backward"
//   collectives of gloo communicator: issued 1842, started 1841, finished 1841
//   #1 allreduce of 1 floats: issued at 12.345 s, started at 12.345 s, finished at 12.346 s
//   ...
//
// gdb still gives the native stacks of every thread afterwards. The handler only formats and write(2)s: it is
// async-signal-safe and can run while the training thread is blocked in a collective.

namespace dtrain::trainer {

// The signal the dump is announced on: SIGUSR2, as the Python helper (worker/python/dtrain_health.py) uses.
// When DTRAIN_STACKS_FILE is set and the signal has no handler yet, opens the file for appending, installs the
// handler and announces it to the agent: one datagram on DTRAIN_HEALTH_SOCKET (agent/service/health_socket.h), the
// way the agent learns from the kernel that the announcing process is the worker itself, which a gRPC report
// cannot tell it. Returns the signal number, or 0 when nothing was installed (not started by dtrain, the file
// cannot be opened, or the signal is taken).
int install_stack_dump();

// The announcement again, when install_stack_dump() installed the handler (nothing otherwise). The agent drops an
// announcement that arrives before it has recorded this process as the rank's worker (a worker can start faster
// than its agent's bookkeeping, as on a loaded machine), and would then never ask for the dump: the health reporter
// repeats it with its first reports.
void reannounce_stack_dump();

}  // namespace dtrain::trainer

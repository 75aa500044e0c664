#pragma once
// The PID namespace a supervisor's workers live in, so that nothing of a worker's tree survives when every dtrain
// process of the node is killed at once (`pkill -9 dtrain`: the agent, its keepers and this namespace's holder).
//
//   agent ── keeper (host pid namespace) ── worker ── its descendants        (all in the job's pid namespace)
//     └──── holder: `dtrain-pidns`, init (pid 1) of the job's pid namespace; orphans of the tree are reparented to it
//
// Why a namespace: the keepers (keeper.h) end a worker's tree when the agent dies, but they die too under
// `pkill -9 dtrain`, and then a worker's setsid'd or double-forked descendants lived on under init. The kernel kills
// every process of a PID namespace when its init exits, whatever killed it; the holder exits when this process does
// (its lifeline pipe reads EOF) and is itself named dtrain-*, so a node-wide SIGKILL takes the namespace with it.
//
// One namespace per Supervisor (per job on an agent) at a time, shared by all its workers, made when they are
// spawned and ended by the stop that leaves it empty (an idle agent keeps no holder), not one per worker: a pid one
// worker gives another is then valid in both (what intra-node transports that exchange pids expect: NCCL's,
// pidfd_open of a peer, /proc/<peer>), pids stay unique among them (per-worker namespaces would make every worker
// pid 2), and one holder costs one process for the whole node.
// The workers also get a mount namespace whose /proc is this PID namespace's (the holder mounts it; every other
// mount is the host's, kept in step as a slave), so getpid() and /proc/<pid> agree inside the worker (psutil,
// faulthandler, `ps` in a worker's shell). The agent, its logs, the launcher and `dtrain status` show the host pid.
//
// Needs CAP_SYS_ADMIN (root, as agents that bind workers and read every worker's /proc usually run). Without it
// create_pid_namespace fails with permission_denied and the supervisor runs its workers as before: the keepers
// still end each tree when the agent dies alone, but a node-wide SIGKILL leaves setsid'd or double-forked
// descendants running under init. No user namespace is made for an unprivileged agent: it would map every other
// uid to nobody inside the worker (files of other users, NFS) and many clusters disable them.

#include <sys/types.h>

#include "common/status.h"

namespace dtrain::supervisor {

// A live namespace: the holder and what a keeper needs to put a worker in it. Descriptors are close-on-exec.
struct PidNamespace {
  pid_t holder = 0;    // our child; 0 when there is no namespace
  int lifeline = -1;   // write end of the holder's lifeline: closing it (or our exit) makes the holder exit
  int pid_ns = -1;     // /proc/<holder>/ns/pid: setns(CLONE_NEWPID) before the fork puts the child in it
  int mnt_ns = -1;     // /proc/<holder>/ns/mnt: the worker's setns(CLONE_NEWNS) gives it the namespace's /proc

  bool active() const { return holder > 0; }
};

// Starts a holder in a new PID and mount namespace and waits (at most a few seconds) until it has mounted its
// /proc. Call on the thread that reaps this process's children (the holder is reaped like any stray child).
// permission_denied without CAP_SYS_ADMIN; internal for any other failure; the message says what to expect then.
Result<PidNamespace> create_pid_namespace();

// Ends the namespace: SIGKILL to the holder (the kernel kills everything left in it), its descriptors closed. The
// holder is left for the caller's reaping; `ns` becomes inactive.
void close_pid_namespace(PidNamespace& ns);

}  // namespace dtrain::supervisor

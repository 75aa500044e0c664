#pragma once
// The node agent's process supervisor: starts one job's workers, streams their output line by line, reports every
// exit the moment it happens, and stops them so that nothing below the agent is left running.
//
// Rules for the agent:
//  * Call prepare_process() first in main(), before any thread exists (the constructor checks it was called).
//  * One Supervisor per process at a time: it reaps every child of the process (waitpid(-1)), including orphans
//    reparented to the agent as subreaper, so other code in the agent must not fork children of its own
//    (std::system, popen) while a Supervisor exists.
//  * Each worker runs below a keeper of its own (keeper.h), a small child of this process that holds the worker's
//    whole tree, so that the tree dies with this process even when it is SIGKILLed. Events still name the worker:
//    `started` gives the worker's own pid (its parent is the keeper), and exit codes and signals are the worker's.
//  * Events run on the supervisor's thread, one at a time, and must not block or throw. For one worker they come
//    in order: started, line..., exited (after every line it wrote before exiting), then possibly more lines that
//    descendants still holding its pipes write, until they close them or stop_all ends. A spawn failure gives one
//    exited (spawn_error set) and no started. A stop_all's done comes after the exited of every worker it ended.
//  * spawn() may be called from any thread, including from inside an event (it then runs at once). stop_all() and
//    running() may be called from any thread; stop_all_and_wait() from any thread but the supervisor's. Do not
//    destroy the Supervisor from inside an event.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/supervisor/process/process_spec.h"
#include "agent/supervisor/process_tree.h"

namespace dtrain::supervisor {

// Call first in main(), before any thread exists: blocks SIGCHLD in the calling thread (so every later thread
// inherits the mask and only the supervisor's signalfd sees it), resets SIGCHLD to its default disposition (an
// ignored SIGCHLD would make the kernel reap children before we see their status) and makes this process a child
// subreaper (PR_SET_CHILD_SUBREAPER), so orphaned descendants of workers are reparented to us and can be reaped and
// killed. Idempotent. Throws std::system_error.
void prepare_process();

// Callbacks from the supervisor's thread (see the rules above). Any may be empty.
struct Events {
  std::function<void(std::uint64_t id, pid_t pid)> started;  // exec succeeded
  // One line of output without its '\n' (a line over 64 KiB comes in pieces of at most 64 KiB, cut between UTF-8
  // characters; a last line without '\n' is delivered when the worker exits or the pipe closes). The bytes are the
  // worker's, not necessarily UTF-8. The view is valid only during the call.
  std::function<void(std::uint64_t id, bool is_stderr, std::string_view line)> line;
  std::function<void(const ProcessExit&)> exited;  // after the output the process wrote before exiting was read
  // The worker's log file could not be written (`message` says which file and why); once per worker, at the moment
  // it happens. Its ProcessExit counts what was lost.
  std::function<void(std::uint64_t id, const std::string& message)> log_failed;
};

// How a Supervisor contains its workers.
struct Options {
  // Run every worker in one PID namespace of this Supervisor's (pid_namespace.h), so that nothing of their trees
  // survives a SIGKILL of every dtrain process on the node. The namespace is made when workers are spawned and ended
  // by a stop_all that leaves nothing in it: an idle Supervisor holds no process. Needs CAP_SYS_ADMIN: without it the workers run as
  // without this option, and containment() says so. Only for workers whose parent_death_signal is SIGKILL or 0:
  // the namespace ends at once when this process is gone, ahead of any orphan_grace.
  bool pid_namespace = false;
  // With pid_namespace: the namespace made at construction (to learn whether one can be made) is kept for the first
  // workers instead of being ended at once and made again when they are spawned. For a Supervisor whose workers come
  // right away (the local agents a launcher starts for its job): their start then does not wait for a namespace's
  // /proc to be mounted (BENCHMARKS.md, "Launch in 0.1 s"). An agent waiting for launchers leaves it false, so that
  // it holds no process while idle.
  bool keep_first_namespace = false;
};

class Supervisor {
 public:
  // How long the child may take from fork to exec before spawn() stops waiting for its verdict (an exec failure
  // reported later still shows up as spawn_error in its ProcessExit).
  static constexpr std::chrono::seconds kExecReportTimeout{5};
  // How long the destructor waits for SIGKILLed processes to disappear before it returns anyway.
  static constexpr std::chrono::seconds kShutdownTimeout{5};

  // Starts the supervisor thread. Throws std::logic_error when prepare_process() was not called or another
  // Supervisor exists, std::system_error when the kernel refuses the descriptors it needs.
  explicit Supervisor(Events events, Options options = {});
  // SIGKILL to every descendant, reap, join the thread (bounded by kShutdownTimeout). No event runs during or
  // after destruction; pending stop_all callbacks are dropped.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Fork+exec on the supervisor's thread (PR_SET_PDEATHSIG is tied to the thread that forked: it must outlive the
  // children). Returns after every spec was started or failed (failures also produce `exited` with spawn_error
  // set, before this returns). While a stop_all is in progress nothing is started (spawn_error says so): spawn
  // again from its `done`. Throws std::runtime_error if the supervisor thread does not answer in time (an event
  // callback is blocking it).
  void spawn(std::vector<ProcessSpec> specs);
  // The same without waiting: the specs are started on the supervisor's thread as soon as it gets to them, and the
  // caller learns the outcome only from the events (started, or exited with spawn_error). For callers that must not
  // block, e.g. an agent starting its workers on a machine so loaded that the supervisor thread runs late.
  void spawn_async(std::vector<ProcessSpec> specs);
  // SIGTERM to every process group and every descendant of this process (including descendants that called setsid
  // or double-forked, and orphans reparented to a keeper or to this subreaper; never to the keepers, which end by
  // themselves once their tree is empty and are not counted), then SIGKILL after `grace` to whatever remains,
  // repeating the scan until nothing is left; `done(sigkilled_count)` on the supervisor thread once no descendant
  // exists and all are reaped (after the last `exited`), sigkilled_count = processes that needed SIGKILL. A second
  // stop_all while one is running just adds its callback. If something survives SIGKILL for 10 s
  // (stuck in the kernel), done is called anyway; descendants(getpid()) then shows it.
  void stop_all(std::chrono::milliseconds grace, std::function<void(unsigned sigkilled)> done);
  // stop_all, then blocks the calling thread until its done ran (true) or `timeout` passed (false; the sweep goes
  // on). For shutdown paths that must not return while workers live. Throws std::logic_error on the supervisor's
  // thread (inside an event), where waiting would deadlock.
  bool stop_all_and_wait(std::chrono::milliseconds grace, std::chrono::milliseconds timeout);
  // Direct workers not yet exited.
  std::size_t running() const;
  // How workers are contained, for the agent's log: "keepers and a PID namespace", or "keepers only: " and why
  // there is no namespace (with what that means). Fixed at construction.
  std::string containment() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::supervisor

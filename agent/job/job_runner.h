#pragma once

// JobRunner: the agent's part of one job. It owns the rounds (attempts) on this node: prepares a round on node 0
// (MASTER_PORT, store namespace), starts the node's worker group through the Supervisor, turns process events
// into the round's events (worker_group.h), and stops the group on command or when the session is lost. It speaks
// domain types only; the Agent converts them to and from the session's messages (wire.h).
//
// The round's lifecycle on this node is RoundState (round_state.h, where its diagram is); every change of it goes
// through transition(). Whenever a round ends on this node (its workers all exited, or a stop swept them) and when
// the runner goes, it removes the job's shared-memory segments of this node from /dev/shm (the shm communicator's,
// worker/shm_segment_name.h): workers killed before their communicator was complete cannot remove them.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "agent/job/evidence.h"
#include "agent/job/node_resources.h"
#include "agent/job/python_command.h"
#include "agent/job/round_state.h"
#include "agent/job/run_dir.h"
#include "agent/store/store.h"
#include "agent/supervisor/supervisor.h"
#include "agent/job/worker_group.h"
#include "common/status.h"

namespace dtrain::agent {

// What the agent gives a JobRunner once, at its construction, for its whole life.
struct JobRunnerHooks {
  // Variables every worker of this node gets on top of its plan (the worker TLS files in a TLS cluster, the health
  // socket).
  std::map<std::string, std::string> worker_env;
  // The directories put first on a worker's PYTHONPATH (before the plan's or the agent's own): the Python health
  // helper's on every worker's, the PyTorch bootstrap's on those a group with instrument_python runs Python in
  // (worker_python_path, python_command.h).
  PythonDirs python_dirs;
  // Called on the supervisor's thread when a worker of the round has been reaped, before its WorkerExited is emitted
  // (null: nothing). The agent drains the health socket there (HealthSocket::drain): a worker's last report, sent
  // just before it died, then reaches the launcher ahead of its exit.
  std::function<void()> before_exit;
  // Which workers' output lines this process writes on its own stdout/stderr as "[rank] line" (AgentOptions::console,
  // `dtrain run` on a node of a multi-node job); null: none. Independent of what goes to the launcher.
  std::function<bool(std::uint32_t rank, std::uint32_t local_rank)> console;
};

class JobRunner {
 public:
  using Emit = std::function<void(RunnerEvent)>;

  // `advertise_host` is the address peers use to reach this node (MASTER_ADDR when it is node 0), `store_address`
  // the host:port of this agent's store server. `workers_soon`: this agent starts workers right away (a launcher's
  // local agent), so the PID namespace made to learn whether one can be is kept for them
  // (supervisor::Options::keep_first_namespace).
  JobRunner(store::Store& store, std::string advertise_host, std::string store_address, JobRunnerHooks hooks = {},
            bool workers_soon = false);
  ~JobRunner();

  // Where events go; set before the first round, replaced when a new session begins (a setter: it is the session's,
  // not the runner's). Called from the supervisor's thread (and from start_group's), so it must not block.
  void set_emit(Emit emit);

  // The job's directory under the agent's run directory (Configure; a setter: each job has its own). start_group
  // places every worker's log and error file there and refuses names outside it (run_dir.h).
  void set_job_files(JobFiles files);

  // Node 0: reserves MASTER_PORT and opens the round's store namespace (dropping the previous one).
  RoundPreparation prepare_round(const RoundRequest& request);

  // Starts the round's workers on this node. Refused (failed_precondition) while another round runs or stops, and
  // (invalid_argument) when a worker's log or error file lies outside the job's directory; nothing starts then.
  Status start_group(const GroupSpec& group);

  // Stops every process of the job on this node; emits GroupStopped once nothing is left.
  void stop_group(std::uint32_t round, std::chrono::milliseconds grace);

  // Stops everything and blocks until nothing is left or `timeout` passes. True when nothing is left.
  bool stop_and_wait(std::chrono::milliseconds grace, std::chrono::milliseconds timeout);

  RoundState state() const;

  // Whether a health report for `rank` that carries `report_token` may be accepted (permission_denied says why
  // not): the rank must be one of this node's workers in the current round, and the token the DTRAIN_REPORT_TOKEN
  // that start_group gave it.
  // What the report token guards, and what it does not: it keeps a worker from reporting as another by mistake (a
  // wrong RANK, every process reporting as rank 0), and with the round's job token it keeps out other users and
  // other jobs, which cannot read a worker's environment (/proc/PID/environ is the worker's uid's, mode 0400) and
  // hold other tokens. It does not authenticate a worker against another process of the same uid on the node: that
  // one can read the token from /proc/PID/environ, and hiding it would not help, because the same uid may ptrace
  // the worker and read it from memory (the kernel's default with no Yama LSM, and Yama's ptrace_scope 0), signal
  // it, or write to its files. PR_SET_DUMPABLE=0 in every worker would close /proc/PID/environ and ptrace, but also
  // the agent's gdb stack collection on a hang and the worker's core dumps; passing the token on a descriptor
  // would break DTRAIN_REPORT_TOKEN, which any program (dtrain_health.py, a user's own reporter) reads as it reads
  // RANK. The workers of one uid on a node trust each other, as processes of one user do.
  Status check_reporter(std::uint32_t rank, const std::string& report_token) const;

  // Whether a datagram for `rank` may speak for it: only the worker process this runner started does (`sender`, the
  // kernel's SO_PASSCRED pid), never a process that inherited its environment (a DataLoader worker started with
  // spawn, a subprocess, a wrapper's child). failed_precondition naming both pids otherwise, and while the worker's
  // pid is not known yet.
  Status check_sender(std::uint32_t rank, pid_t sender) const;

  // The token of the current round (worker reports must carry it).
  std::string current_token() const;

  // A worker's report announced that it writes its Python stacks to its DTRAIN_STACKS_FILE on `signal`. Kept (for
  // stack_targets) only when `sender`, as the kernel told it, is the worker's own process and the signal is one a
  // handler can take without harm elsewhere (SIGUSR1, SIGUSR2, a real-time signal): the agent never signals a
  // process that did not ask for it (a shell around the script would die of SIGUSR2).
  void note_dump_signal(std::uint32_t rank, pid_t sender, std::uint32_t signal);

  // The workers of `round` still running, each with where its stacks go (attempt_<round>/stacks/rank_<r>.txt in
  // the job's directory, placed now); none when `round` is not the current one.
  std::vector<StackTarget> stack_targets(std::uint32_t round) const;

 private:
  struct Worker {
    WorkerSpec spec;           // log_path and error_file as placed under the job's directory
    bool exited = false;
    std::string report_token;  // its DTRAIN_REPORT_TOKEN
    pid_t pid = 0;             // once started
    std::string stacks_file;   // its DTRAIN_STACKS_FILE: attempt_<n>/stacks/rank_<r>.dump.txt
    int dump_signal = 0;       // announced by the worker itself (note_dump_signal); 0: none
  };
  struct PlacedFiles {
    std::string log;
    std::string error;
    std::string stacks;
  };

  // The worker's log and error file placed under the job's directory ("" where the launcher named none), and its
  // Python stacks file. JobFiles::place's refusal for a name outside it. Called with mutex_ held.
  Result<PlacedFiles> place_files(std::uint32_t round, const WorkerSpec& worker) const;
  // What the supervisor runs for `worker` (placed files already in it). Called with mutex_ held.
  supervisor::ProcessSpec process_spec(std::uint32_t round, const Worker& worker) const;
  // Moves the round's state by `event`; false (nothing changed) where transition() refuses. Called with mutex_ held.
  bool move(RoundEvent event);
  void on_started(std::uint64_t id, pid_t pid);
  void on_exited(const supervisor::ProcessExit& exit);
  void on_line(std::uint64_t id, bool is_stderr, std::string_view line);
  void emit(RunnerEvent event);
  void stop(std::chrono::milliseconds grace, std::function<void(unsigned killed)> done);
  // remove_shm_segments for this node's share of the job (shm_prefix_).
  void remove_shm_segments() const;

  store::Store& store_;
  std::string advertise_host_;
  std::string store_address_;

  mutable std::mutex mutex_;
  const JobRunnerHooks hooks_;
  Emit emit_;
  std::string store_token_;   // namespace this node's store opened (node 0)
  std::string round_token_;   // the running round's token, from StartGroup
  std::uint32_t round_ = 0;
  std::string shm_prefix_;    // this node's shm segments of the job (worker/shm_segment_name.h), from the workers' env
  RoundState state_ = RoundState::idle;
  std::map<std::uint32_t, Worker> workers_;  // by rank, current round only
  bool instrument_python_ = false;  // the running round's GroupSpec::instrument_python
  JobFiles job_files_;

  // Declared last: destroyed first, so its thread never calls into a half-destroyed runner.
  std::unique_ptr<supervisor::Supervisor> supervisor_;
};

// Process ids handed to the supervisor: the round in the high half, the rank in the low half, so an event from an
// older round's process can never be mistaken for the current one.
inline std::uint64_t process_id(std::uint32_t round, std::uint32_t rank) {
  return (static_cast<std::uint64_t>(round) << 32) | rank;
}
inline std::uint32_t round_of(std::uint64_t process_id) { return static_cast<std::uint32_t>(process_id >> 32); }
inline std::uint32_t rank_of(std::uint64_t process_id) { return static_cast<std::uint32_t>(process_id & 0xffffffffu); }

}  // namespace dtrain::agent

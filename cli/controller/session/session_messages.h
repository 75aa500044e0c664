#pragma once

// What flows on an agent session, in the launcher's own terms. Everything in cli/controller/ speaks these types;
// wire.h is the one place that converts them to and from the protocol's messages (proto/dtrain/v1/session.proto,
// whose comments are the reference for each field's meaning).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/node/reach.h"
#include "agent/node/topology/node_topology.h"
#include "common/report/health_values.h"

namespace dtrain::controller {

// ---------------------------------------------------------------- agent -> launcher (reports)

struct NetInterface {
  std::string name;      // "eth0"
  std::string address;   // its IPv4 address
};

// The first message of a session: who the agent is and what its node has.
struct AgentHello {
  std::string hostname;
  std::string host_id;                 // the physical machine (simulated local nodes share it)
  std::string dtrain_version;
  std::string agent_address;           // host:port of its store and report server
  std::vector<unsigned> cpus;          // CPUs the agent may use
  std::vector<int> cpu_numa;           // NUMA node of each entry of cpus
  unsigned gpu_count = 0;
  std::vector<NetInterface> interfaces;
  std::uint64_t mem_total_bytes = 0;   // the node's RAM; 0 = not known (the RAM diagnosis skips the node)
  double cpu_gemm_flops = 0;           // the node's cached fp32 GEMM rate, the peak of its CPU ranks; 0 = none
  unsigned cpu_gemm_threads = 0;       // the threads it was measured on
  std::optional<unsigned> slot;        // ssh: index in nodes.hosts; slurm: SLURM_NODEID; unset when started by hand
  node::topo::NodeTopology topology;   // per local rank, what `dtrain topo` recommends on that node
};

struct RoundPrepared {
  std::uint32_t round = 0;
  unsigned master_port = 0;
  std::string store_address;
};

struct WorkerStarted {
  std::uint32_t round = 0;
  unsigned rank = 0;
  std::uint32_t pid = 0;
};

// How one worker ended.
struct WorkerExit {
  std::uint32_t round = 0;
  unsigned rank = 0;
  std::uint32_t pid = 0;
  int exit_code = 0;                    // valid when signal == 0
  int signal = 0;                       // terminating signal, 0 if it exited
  bool stopped_by_agent = false;        // killed by a StopGroup: not a failure of its own
  std::uint64_t runtime_ms = 0;
  std::vector<std::string> stderr_tail; // its last stderr lines, as written
  std::string error_file_json;          // TORCHELASTIC_ERROR_FILE's contents, if written
  std::uint64_t exit_unix_ms = 0;
  std::string spawn_error;              // non-empty when it could not be started at all
  std::string log_error;                // non-empty when its log file could not be written
  std::uint64_t log_bytes_lost = 0;
  std::string log_path;                 // where its agent placed the log, on that node

  // A failure of its own: it could not start, was killed by a signal, or exited non-zero, and no StopGroup did it.
  bool failed() const { return !stopped_by_agent && (!spawn_error.empty() || signal != 0 || exit_code != 0); }
};

struct LogLine {
  unsigned rank = 0;
  bool is_stderr = false;
  std::string text;                     // one line (or a piece of a long one) without '\n'
};

struct LogLines {
  std::uint32_t round = 0;
  std::vector<LogLine> lines;
};

struct GroupDone {
  std::uint32_t round = 0;              // every worker of the round on that node exited by itself
};

struct GroupStopped {
  std::uint32_t round = 0;              // the round's StopGroup completed on that node
};

// A worker's progress report: the fields of its WorkerReport (report.proto, as common/report/health_values.h's
// HealthValues), which its agent checked and forwarded inside WorkerHealth, and that agent's clock. The launcher's
// one shape of a report: the round, the health watch, the status rows and the console keep it as it is; the
// diagnoser and the samples of events.jsonl take its step as a report::RankSample (diagnosis.h's sample_of). Its
// phase is valid UTF-8 (the agent cuts what is not).
struct WorkerHealth : HealthValues {
  std::uint64_t unix_ms = 0;            // its agent's clock when it forwarded the report
};

// What a worker's agent saw of it in /proc (every ~1 s, with no help from the worker).
struct WorkerSample {
  std::uint32_t round = 0;
  unsigned rank = 0;
  double cpu_seconds = 0;               // user + system time of the whole process so far
  char state = '?';                     // the main thread's state letter (R, S, D, T, Z, ...)
  unsigned threads = 0;
  std::uint64_t unix_ms = 0;            // its agent's clock when it sampled
};

struct LogWriteFailed {
  std::uint32_t round = 0;
  unsigned rank = 0;
  std::string message;                  // which file and why
};

// The agent gave up on the session (a broken command, an internal failure).
struct AgentError {
  std::string message;
};

// An answer to a ProbeRequest (`dtrain doctor JOB.yaml`).
struct ProbeResult {
  std::uint32_t id = 0;
  std::string node_checks_json;         // the node's doctor report
  std::uint64_t unix_ms = 0;            // the agent's clock when it answered
  unsigned open_port = 0;               // the port it opened (ProbeRequest::open_port), 0 if none
  std::vector<node::Reach> reach;
  std::string dtrain_version;
  std::string driver_version;
  int nccl_version = 0;
  std::vector<std::string> interfaces;
};

// Where a worker's communicator stood (trainer/comm/trace.h), from its own dump: the last collective sequence
// numbers it issued, started and finished, and its oldest unfinished collective ("" when none).
struct CollectiveState {
  std::uint64_t issued = 0;
  std::uint64_t started = 0;
  std::uint64_t finished = 0;
  std::string pending;
};

// One worker's stacks, written by its agent when the launcher asked for evidence (CollectEvidence).
struct RankStacks {
  unsigned rank = 0;
  std::string stacks_path;              // the full stacks, on the agent's node ("" when nothing could be written)
  std::vector<std::string> top_frames;  // the main thread's first frames (gdb), else each thread's state and wchan
  std::string error;                    // why the stacks are missing or partial ("" when complete)
  std::optional<CollectiveState> collectives;   // when the worker dumped its collective trace (dtrain-trainer)
};

// A node's answer to CollectEvidence: its workers of the round that were still running.
struct Evidence {
  std::uint32_t round = 0;
  std::vector<RankStacks> ranks;
};

// A heartbeat or goodbye: the agent is alive, nothing else.
// `dtrain run` on the agent's node got this signal (Ctrl-C there): stop the whole job as for the launcher's own.
struct AgentInterrupt {
  int signal = 0;
};

struct AgentAlive {};

using AgentReport = std::variant<AgentHello, RoundPrepared, WorkerStarted, WorkerExit, LogLines, GroupDone,
                                 GroupStopped, WorkerHealth, WorkerSample, LogWriteFailed, AgentError, ProbeResult,
                                 Evidence, AgentInterrupt, AgentAlive>;

// ---------------------------------------------------------------- launcher -> agent (commands)

struct ConfigureNode {
  std::string job_id;
  unsigned node_rank = 0;
  std::uint32_t lease_ms = 0;           // the agent stops its workers when the launcher is silent this long
  std::uint32_t heartbeat_interval_ms = 0;
  std::uint32_t stop_grace_ms = 0;      // grace when the agent stops workers on its own
};

// Node 0: reserve MASTER_PORT and open the round's store namespace, guarded by store_token.
struct PrepareRound {
  std::uint32_t round = 0;
  std::string store_token;
};

struct WorkerLaunch {
  unsigned rank = 0;
  unsigned local_rank = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;
  std::vector<unsigned> cpus;           // empty = no binding
  std::string log_path;                 // relative to the job's directory on the agent (agent/job/run_dir.h)
  bool stream_stdout = false;
  bool stream_stderr = false;
  std::string error_file;               // relative, like log_path
};

struct StartGroup {
  std::uint32_t round = 0;
  std::string round_token;              // the round's DTRAIN_JOB_TOKEN
  std::vector<WorkerLaunch> workers;
  bool instrument_python = false;       // health.instrument: auto (StartGroup.instrument_python)
  std::uint32_t report_window_ms = 0;   // the agents coalesce health reports over this (StartGroup.report_window_ms)
};

struct StopGroup {
  std::uint32_t round = 0;
  std::uint32_t grace_ms = 0;           // SIGTERM, this long, then SIGKILL
  std::string reason;
};

struct Shutdown {
  std::string reason;
  std::optional<int> job_exit_code;  // the launcher's exit code for the job, when it is known
};

struct Heartbeat {
  std::uint64_t sent_unix_ms = 0;
};

struct ProbeRequest {
  std::uint32_t id = 0;
  bool node_checks = false;             // run the node's doctor checks
  std::string log_dir;                  // absolute; the disk checks look there
  std::string checkpoint_dir;
  bool open_port = false;               // listen on a free port as node 0 does for MASTER_PORT
  std::vector<std::string> reach;       // host:port addresses to open a TCP connection to
  std::uint32_t reach_timeout_ms = 0;
};

// A worker of the round failed a health check: write every worker's stacks (the agent's run directory,
// attempt_<round>/stacks/rank_<r>.txt) and answer with Evidence within budget_ms.
struct CollectEvidence {
  std::uint32_t round = 0;
  std::uint32_t budget_ms = 0;
};

using Command = std::variant<ConfigureNode, PrepareRound, StartGroup, StopGroup, Shutdown, Heartbeat, ProbeRequest,
                             CollectEvidence>;

}  // namespace dtrain::controller

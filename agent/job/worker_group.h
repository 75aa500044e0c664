#pragma once

// What a round asks of this node's JobRunner, and what JobRunner reports about it, as domain types: no protobuf
// here. agent/session/wire.h converts them from and to the session's messages (dtrain/v1/session.proto), whose comments
// describe each field the same way.

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "agent/supervisor/process/process_spec.h"

namespace dtrain::agent {

// Node 0 only: reserve MASTER_PORT and open the round's store namespace (PrepareRound).
struct RoundRequest {
  std::uint32_t round = 0;
  std::string store_token;   // guards the round's store namespace
};

// Node 0's answer (RoundPrepared).
struct RoundPreparation {
  std::uint32_t round = 0;
  unsigned master_port = 0;   // 0 when no port could be reserved
  std::string store_address;  // host:port workers dial for the store
};

// One worker of the round on this node.
struct WorkerSpec {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  std::vector<std::string> argv;           // argv[0] is resolved through PATH; never through a shell
  std::map<std::string, std::string> env;  // set on top of the agent's own environment
  std::string working_dir;
  std::vector<unsigned> cpus;              // CPU affinity; empty = no binding
  std::string log_path;                    // relative to the job's directory (run_dir.h); "" = no log file
  bool stream_stdout = false;              // forward stdout lines to the launcher's console
  bool stream_stderr = false;              // forward stderr lines to the launcher's console
  std::string error_file;                  // TORCHELASTIC_ERROR_FILE, relative like log_path; "" = none
};

// The round's workers on this node (StartGroup).
struct GroupSpec {
  std::uint32_t round = 0;
  std::vector<WorkerSpec> workers;
  std::string round_token;  // the round's DTRAIN_JOB_TOKEN: worker health reports must carry it
  bool instrument_python = false;  // health.instrument: auto; which workers it reaches: runs_python (python_command.h)
};

// ---- what JobRunner reports, each naming its round so that a late event of an older round is recognised

struct WorkerStarted {
  std::uint32_t round = 0;
  std::uint32_t rank = 0;
  pid_t pid = 0;
};

struct WorkerExited {
  std::uint32_t round = 0;
  std::uint32_t rank = 0;
  supervisor::ProcessExit exit;   // how it ended (or why it never ran), as the supervisor saw it
  std::string error_file_json;    // its TORCHELASTIC_ERROR_FILE if written (size-limited)
  std::string log_path;           // where the agent placed its log ("" = none)
  std::uint64_t exit_unix_ms = 0;
};

// One line of a worker's output (or a piece of a long one) without '\n', for the launcher's console.
struct LogLine {
  std::uint32_t round = 0;
  std::uint32_t rank = 0;
  bool is_stderr = false;
  std::string text;
};

// A worker's log file stopped being written; the worker keeps running.
struct LogWriteFailed {
  std::uint32_t round = 0;
  std::uint32_t rank = 0;
  std::string message;
};

// Every worker of the round on this node has exited by itself.
struct GroupDone {
  std::uint32_t round = 0;
};

// A stop_group has ended: no process of the job is left on this node.
struct GroupStopped {
  std::uint32_t round = 0;
  unsigned killed = 0;  // processes that needed SIGKILL after the grace period
};

using RunnerEvent = std::variant<WorkerStarted, WorkerExited, LogLine, LogWriteFailed, GroupDone, GroupStopped>;

}  // namespace dtrain::agent

#pragma once

// What the user sees on the launcher's terminal: worker lines with a "[rank]" prefix, progress notes, and the one
// failure summary.

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/controller/session/session_messages.h"

namespace dtrain::controller {

// How a failed worker ended, gathered from its WorkerExit and the plan.
struct Failure {
  unsigned rank = 0;
  unsigned node = 0;
  std::string host;
  WorkerExit exit;           // code or signal, stderr tail, error file, spawn error
  std::string log_path;
  std::optional<WorkerHealth> last_health;   // the rank's last health report, if it sent any
  std::optional<WorkerSample> last_sample;   // its agent's last look at it in /proc, if any
  std::uint64_t failed_unix_ms = 0;              // when the launcher learned of the failure
  // Set when a health check failed it while it ran (health_watch.h): what the launcher saw. `exit` then tells how the
  // stop ended it, and says nothing of its own.
  std::string health_failure;
  std::optional<RankStacks> stacks;              // its stacks, when its agent wrote them (CollectEvidence)
  // Which rank the job's collectives wait for, from every rank's trace (collective_hang.h), when they dumped one.
  std::optional<std::string> collective_hang;
};

// The launcher's exit code when the root cause failed a health check (it hung, stopped, or never started): 124, as
// timeout(1) says "timed out", so scripts tell it from a crash's code.
inline constexpr int kHealthCheckExitCode = 124;

class Console {
 public:
  Console(std::FILE* out, std::FILE* err) : out_(out), err_(err) {}

  void worker_lines(const LogLines& lines);
  // A launcher note ("dtrain: ..."), on stderr so that stdout carries only the workers' own output.
  // Each line (and each note, however long) reaches the file in one write(2), never split by stdio buffering.
  void note(std::string_view text);

 private:
  std::FILE* out_;
  std::FILE* err_;
};

// "rank 3", or with its place in a grid that splits the model as its last health report gave it: "rank 3 (pipeline
// stage 1 of 2, tensor-parallel rank 1 of 2)" (common/report/grid_place.h).
std::string rank_name_of(const Failure& failure);
// "exit code 3", "signal 9 (SIGKILL)", "could not start: ...".
std::string describe_exit(const WorkerExit& exit);
// The launcher's exit code for a failed worker: its own code, 128+signal, or 127 when it never ran.
int exit_code_of(const WorkerExit& exit);
// How a failure happened: the health check that failed it, else describe_exit; and its exit code, the same way
// (kHealthCheckExitCode, else exit_code_of).
std::string describe_failure(const Failure& failure);
int exit_code_of(const Failure& failure);
// The failure summary: which rank, where, how, the last stderr lines, the error file, where the log is.
std::string failure_summary(const std::string& job_id, const Failure& root, const std::vector<Failure>& others,
                            int attempt, int max_restarts);
// The human message from a PyTorch error file (TORCHELASTIC_ERROR_FILE) and its traceback if present; the raw
// text (cut) if it is not the JSON PyTorch writes.
std::string error_file_message(const std::string& json);

}  // namespace dtrain::controller

#pragma once

// Where an agent keeps a job's files, and the rule for the paths a launcher names. Like kubelet
// (/var/log/pods/<pod>/...) and Nomad's client (<data_dir>/alloc/<id>/alloc/logs), the node daemon places a job's
// files under a directory of its own; a launcher only names them inside the job's directory:
//
//   <run_dir>/<job id>/attempt_<n>/rank_<r>.log          stdout and stderr of rank r
//   <run_dir>/<job id>/attempt_<n>/rank_<r>_error.json   TORCHELASTIC_ERROR_FILE, read back when the worker exits
//
// A name is relative to the job's directory (or absolute and inside it), without "." or ".." components. Every
// directory on the way below the run directory is created here and opened without following symlinks, and files
// are opened with O_NOFOLLOW, so neither a hostile launcher (error_file: /etc/shadow) nor a worker that plants a
// symlink makes the agent read or write anything outside. A launcher that starts its agents itself (provider
// local) gives them --run-dir <logs.dir>, so the logs are where the README says: <logs.dir>/<job id>/attempt_<n>/.

#include <cstddef>
#include <string>

#include "common/status.h"

namespace dtrain::agent {

// <state_dir()>/runs: $XDG_STATE_HOME/dtrain/runs, else $HOME/.local/state/dtrain/runs (common/os/state_dir.h).
std::string default_run_dir();

// A path a launcher named that the agent refuses to use is an expected failure (a Status whose message says which,
// why, and what is allowed): invalid_argument for a name or a job id that breaks the rule above, or a symlink or
// non-directory on the way; internal when a directory cannot be created or opened (errno's text, and where).
class JobFiles {
 public:
  JobFiles() = default;
  // The files of job `job_id` under `run_dir` (nothing is created yet). invalid_argument for a job id that cannot
  // be one directory name (security::is_valid_job_id).
  static Result<JobFiles> for_job(std::string run_dir, std::string job_id);

  bool empty() const { return job_id_.empty(); }
  // <run_dir>/<job id>, absolute.
  const std::string& dir() const { return dir_; }

  // The absolute path of `name` (what: "rank 2's log_path", for messages) inside the job's directory, with its
  // parent directories created (0755). Refused when `name` leads outside, or a directory on the way is a symlink or
  // not a directory.
  Result<std::string> place(const std::string& name, const std::string& what) const;

 private:
  std::string run_dir_;
  std::string job_id_;
  std::string dir_;
};

// Up to `limit` bytes of a file that place() returned; "" when it does not exist. Refuses (read_bounded_file's
// Status) a symlink or anything but a regular file, so a worker cannot point its error file at a file it may not
// read.
Result<std::string> read_placed_file(const std::string& path, std::size_t limit);

}  // namespace dtrain::agent

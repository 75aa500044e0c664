#pragma once

// Which job directory a command that reads a finished or running job means (`dtrain status`, `dtrain report`): a
// job's directory is one with an event log (events.jsonl) or a status snapshot (status.json).

#include <string>

#include "common/status.h"

namespace dtrain::controller {

// Where `logs.dir` puts jobs by default, and so where these commands look.
inline constexpr const char* kRunsDir = "runs";

// `target` empty: the newest job under `runs_dir` (by the time of its first event, job_start); else `target` itself
// when it is a job's directory, or the job id `target` under `runs_dir`. `command` ("status", "report") goes into
// the advice of the not_found error.
Result<std::string> find_run_dir(const std::string& target, const std::string& command,
                                 const std::string& runs_dir = kRunsDir);

}  // namespace dtrain::controller

#pragma once

// Names of worker environment variables that dtrain owns or treats specially.

#include <string_view>

namespace dtrain::spec::detail {

// [A-Za-z_][A-Za-z0-9_]*
bool valid_env_name(std::string_view name);

// Variables make_plan sets for every worker from the job's shape and round (RANK, MASTER_PORT,
// TORCHELASTIC_RUN_ID, DTRAIN_JOB_TOKEN, ...). A spec may not set them: a worker with a RANK that disagrees with
// its place in the job hangs rendezvous instead of failing.
bool is_reserved_env(std::string_view name);

}  // namespace dtrain::spec::detail

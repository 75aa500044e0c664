#pragma once

// `dtrain run --nnodes N`: this node's part of a multi-node job, the same command on every node (multi_node.cpp says
// how). Compiled into the dtrain binary, not into dtrain_run_options: it launches jobs and runs an agent.

#include <string>

#include "cli/launching/launching.h"
#include "cli/run/torchrun_options.h"

namespace dtrain::cli {

// `spec` is the validated job of provider join; `run` says this node's part (run.multi) and --log-dir; `console`:
// run::node_console_text's filter of its lines. Returns the process exit code.
int run_multi_node(spec::Spec spec, const run::Resolved& run, const std::string& console, const LaunchFlags& flags);

}  // namespace dtrain::cli

#pragma once

// `dtrain run`'s command line, as `dtrain run` and `dtrain tune` (its script form) share it: the options dtrain adds
// to torchrun's, and the job they make. cmd_run.cpp launches that job; cmd_tune.cpp runs it for trials.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/run/torchrun_options.h"
#include "cli/spec/spec.h"

namespace dtrain::cli::run {

struct RunArgs {
  TorchrunArgs torchrun;
  int nodes = 1;
  double grace_s = 10;
  std::string name;
  std::string logs_dir = "runs";
  std::string console = "rank0";
  std::string instrument = "auto";
  std::vector<std::string> command;
};

// dtrain's own options of `dtrain run` (--nodes, --grace-s, --name, --logs-dir, --console, --instrument), torchrun's
// (torchrun_options.h) and the program, everything from the first positional on being the program's.
void add_run_options(CLI::App& cmd, RunArgs& args);

// A job name from the program's file name: lower case, [a-z0-9-] only ("train_gpt.py" -> "train-gpt-py"), at most
// spec::kMaxNameLength characters.
std::string name_from_command(const std::string& program);

struct RunJob {
  spec::Spec spec;   // valid (spec::validate passed)
  Resolved resolved;
};

// The job of a parsed `dtrain run` command line (`cmd`: its subcommand, for `--` and which options were given);
// nothing after printing why on stderr (the command then exits 2). PET_* variables apply as under torchrun.
std::optional<RunJob> resolve_run_job(RunArgs& args, const CLI::App& cmd);

}  // namespace dtrain::cli::run

// `dtrain run -n N [--nodes M] [--max-restarts R] -- CMD ARGS...`: a job without a spec file (torchrun-style).

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "cli/commands.h"

namespace dtrain::cli {
namespace {

// A job name from the program's file name: lower case, [a-z0-9-] only ("train_gpt.py" -> "train-gpt-py"), at most
// spec::kMaxNameLength characters.
std::string name_from_command(const std::string& program) {
  std::string base = program.substr(program.find_last_of('/') + 1);
  std::string name;
  for (char c : base) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (ok) {
      name += l;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  // A long program name still makes a valid job name (validate() bounds its length).
  if (name.size() > spec::kMaxNameLength) name.resize(spec::kMaxNameLength);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name.empty() ? "job" : name;
}

}  // namespace

Action add_run_command(CLI::App& app) {
  struct Args {
    int nproc = 1;
    int nodes = 1;
    int max_restarts = 0;
    double grace_s = 10;
    std::string name;
    std::string logs_dir = "runs";
    std::string console = "rank0";
    std::string instrument = "auto";
    bool dry_run = false;
    std::vector<std::string> command;
    LaunchFlags flags;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run", "Run CMD as N workers per node without a spec file");
  cmd->add_option("-n,--nproc-per-node", args->nproc, "workers per node")->capture_default_str();
  cmd->add_option("--nodes", args->nodes, "simulated nodes on this machine (provider local)")->capture_default_str();
  cmd->add_option("--max-restarts", args->max_restarts, "restarts after a failure")->capture_default_str();
  cmd->add_option("--grace-s", args->grace_s, "seconds between SIGTERM and SIGKILL when stopping")->capture_default_str();
  cmd->add_option("--name", args->name, "job name (default: from the program name)");
  cmd->add_option("--logs-dir", args->logs_dir, "where per-rank logs go")->capture_default_str();
  cmd->add_option("--console", args->console, "whose output to show: rank0 | all | none")->capture_default_str();
  cmd->add_option("--instrument", args->instrument,
                  "health.instrument: auto (a PyTorch script reports its steps with no change to it) | off")
      ->capture_default_str();
  cmd->add_flag("--dry-run", args->dry_run, "print the plan; start nothing");
  add_launch_flags(*cmd, args->flags);
  cmd->add_option("command", args->command, "the program and its arguments (after --)")->required();
  return [args]() {
    spec::Spec spec;
    spec.name = args->name.empty() ? name_from_command(args->command.front()) : args->name;
    spec.source = "dtrain run";
    spec.nodes.min_count = spec.nodes.max_count = args->nodes;
    spec.workers_per_node.count = args->nproc;
    spec.command = args->command;
    spec.restart.max_restarts = args->max_restarts;
    spec.stop.grace_s = args->grace_s;
    spec.logs.dir = args->logs_dir;
    if (args->console == "all") {
      spec.logs.console = spec::Spec::Logs::Console::all;
    } else if (args->console == "none") {
      spec.logs.console = spec::Spec::Logs::Console::none;
    } else if (args->console != "rank0") {
      std::fprintf(stderr, "dtrain run: --console must be rank0, all or none (got '%s')\n", args->console.c_str());
      return 2;
    }
    if (args->instrument == "off") {
      spec.health.instrument = spec::Spec::Health::Instrument::off;
    } else if (args->instrument != "auto") {
      std::fprintf(stderr, "dtrain run: --instrument must be auto or off (got '%s')\n", args->instrument.c_str());
      return 2;
    }
    try {
      spec::validate(spec);
    } catch (const spec::SpecError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    if (args->dry_run) return print_dry_run(spec);
    return launch_job(std::move(spec), args->flags);
  };
}

}  // namespace dtrain::cli

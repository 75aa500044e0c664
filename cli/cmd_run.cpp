// `dtrain run -n N [--nodes M] [--max-restarts R] -- CMD ARGS...`: a job without a spec file; and, on one node,
// torchrun's command line: `dtrain run --standalone --nproc_per_node=2 train.py ARGS` (cli/run/torchrun_options.h
// says what each torchrun option does). The program comes after the options: with `--` it runs as it is; without,
// as under torchrun (a script or -m MODULE under Python, --no-python the program itself). -n and --nproc-per-node are
// one option (N | cpu | auto | gpu); --nodes M is dtrain's simulated nodes on this machine, --nnodes real hosts (1).

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/run/multi_node.h"
#include "cli/run/node_console.h"
#include "cli/run/torchrun_options.h"

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

struct RunArgs {
  run::TorchrunArgs torchrun;
  int nodes = 1;
  double grace_s = 10;
  std::string name;
  std::string logs_dir = "runs";
  std::string console = "rank0";
  std::string instrument = "auto";
  std::string tune;  // --tune FILE: a tune overlay (cli/tune/overlay.h)
  bool dry_run = false;
  std::vector<std::string> command;
  LaunchFlags flags;
};

// The job of a resolved `dtrain run`, before whose output the console shows and the instrumentation.
spec::Spec run_spec(const RunArgs& args, const run::Resolved& r) {
  spec::Spec spec;
  // The job is named from the program (the script or module, not the Python that runs it).
  spec.name = args.name.empty() ? name_from_command(args.command.front()) : args.name;
  spec.source = "dtrain run";
  spec.nodes.min_count = spec.nodes.max_count = args.nodes;
  spec.workers_per_node.count = r.nproc;
  spec.command = r.command;
  spec.restart.max_restarts = r.max_restarts;
  if (r.join_timeout_s) spec.nodes.join_timeout_s = *r.join_timeout_s;
  if (r.node_timeout_s) spec.health.node_timeout_s = *r.node_timeout_s;
  spec.stop.grace_s = args.grace_s;
  spec.logs.dir = args.logs_dir;
  if (r.multi) {
    // One job of provider join: the launcher listens on the endpoint, every node's agent dials it.
    spec.nodes.provider = spec::Provider::join;
    spec.nodes.min_count = r.multi->min_nodes;
    spec.nodes.max_count = r.multi->max_nodes;
    spec.nodes.rendezvous = r.multi->endpoint;
  }
  return spec;
}

// Whose output the console shows: torchrun's options as resolved, else --console (`given`), else rank 0. False,
// having said why, for a --console value that is none of rank0, all, none.
bool apply_console(spec::Spec& spec, const run::Resolved& r, const std::string& console, bool given) {
  using Console = spec::Spec::Logs::Console;
  switch (r.console) {
    case run::Resolved::Console::unchanged: break;
    case run::Resolved::Console::rank0: spec.logs.console = Console::rank0; break;
    case run::Resolved::Console::all: spec.logs.console = Console::all; break;
    case run::Resolved::Console::none: spec.logs.console = Console::none; break;
    case run::Resolved::Console::ranks:
      spec.logs.console = Console::ranks;
      spec.logs.console_ranks = r.console_ranks;
      break;
  }
  if (!given || console == "rank0") return true;
  if (console == "all" || console == "none") {
    spec.logs.console = console == "all" ? Console::all : Console::none;
    return true;
  }
  std::fprintf(stderr, "dtrain run: --console must be rank0, all or none (got '%s')\n", console.c_str());
  return false;
}

// A multi-node job: each node's agent shows its own ranks' lines, so the launcher's console shows none.
int run_nodes(spec::Spec spec, const run::Resolved& r, const LaunchFlags& flags) {
  using Console = spec::Spec::Logs::Console;
  std::string console;
  if (r.console == run::Resolved::Console::ranks) {
    console = run::node_console_text("", r.console_local_ranks);
  } else {
    console = spec.logs.console == Console::all ? "all" : spec.logs.console == Console::none ? "none" : "rank0";
  }
  spec.logs.console = Console::none;
  return run_multi_node(std::move(spec), r, console, flags);
}

// One node: the job, and with --log-dir torchrun's layout from the job's directory once the job ended.
int run_one_node(spec::Spec spec, const run::Resolved& r, const LaunchFlags& flags) {
  if (r.log_dir.empty()) return launch_job(std::move(spec), flags);
  const std::string prefix = spec.name + "-";
  const std::string logs_dir = spec.logs.dir;
  const auto before = run::job_dirs(logs_dir, prefix);
  const int code = launch_job(std::move(spec), flags);
  for (const auto& id : run::job_dirs(logs_dir, prefix)) {
    if (!before.count(id)) run::lay_out_torchrun_logs(r, (std::filesystem::path(logs_dir) / id).string(), id, 0);
  }
  return code;
}

// The action of `dtrain run`, once the command line parsed.
int run_command(RunArgs& args, const CLI::App& cmd) {
  // `--` before the program leaves it in the remaining arguments.
  const auto remaining = cmd.remaining();
  const bool dashdash = std::find(remaining.begin(), remaining.end(), "--") != remaining.end();
  const bool console_given = cmd.count("--console") > 0;
  run::Resolved r;
  r.error = run::apply_torchrun_environment(cmd, args.torchrun, [](const char* name) { return std::getenv(name); });
  if (r.error.empty()) {
    r = run::resolve(args.torchrun, args.command, dashdash, args.nodes, console_given, run::HostFacts::current());
  }
  if (!r.error.empty()) {
    std::fprintf(stderr, "%s\n", r.error.c_str());
    return 2;
  }
  for (const auto& note : r.notes) std::fprintf(stderr, "dtrain run: %s\n", note.c_str());
  spec::Spec spec = run_spec(args, r);
  if (!apply_console(spec, r, args.console, console_given)) return 2;
  if (args.instrument == "off") {
    spec.health.instrument = spec::Spec::Health::Instrument::off;
  } else if (args.instrument != "auto") {
    std::fprintf(stderr, "dtrain run: --instrument must be auto or off (got '%s')\n", args.instrument.c_str());
    return 2;
  }
  try {
    spec::validate(spec);
  } catch (const spec::SpecError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (!apply_tune_or_report(args.tune, spec)) return 2;
  if (args.dry_run) return print_dry_run(spec);
  if (r.multi) return run_nodes(std::move(spec), r, args.flags);
  return run_one_node(std::move(spec), r, args.flags);
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run a program as N workers per node without a spec file, with torchrun's "
                                       "options: on this node, or the same command on every node (--nnodes, "
                                       "--node-rank, --rdzv-endpoint)");
  cmd->add_option("--nodes", args->nodes, "simulated nodes on this machine (provider local)")->capture_default_str();
  cmd->add_option("--grace-s", args->grace_s, "seconds between SIGTERM and SIGKILL when stopping")->capture_default_str();
  cmd->add_option("--name", args->name, "job name (default: from the program name)");
  cmd->add_option("--logs-dir", args->logs_dir, "where per-rank logs go")->capture_default_str();
  cmd->add_option("--console", args->console, "whose output to show: rank0 | all | none")->capture_default_str();
  cmd->add_option("--instrument", args->instrument,
                  "health.instrument: auto (a PyTorch script reports its steps with no change to it) | off")
      ->capture_default_str();
  cmd->add_option("--tune", args->tune, "a tune overlay (tune.yaml): DataLoader, DDP, thread and NCCL knobs applied "
                                        "to an unmodified PyTorch script; needs --instrument auto");
  cmd->add_flag("--dry-run", args->dry_run, "print the plan; start nothing");
  add_launch_flags(*cmd, args->flags);
  run::add_torchrun_options(*cmd, args->torchrun);
  cmd->add_option("command", args->command,
                  "the program and its arguments: script.py ARGS (Python), -m MODULE ARGS, --no-python PROG ARGS, or "
                  "-- CMD ARGS (as it is)");
  // Everything from the first positional on is the program's (torchrun's rule): `run -n 2 train.py --lr 1` passes
  // --lr to train.py.
  cmd->positionals_at_end();
  return [args, cmd]() { return run_command(*args, *cmd); };
}

}  // namespace dtrain::cli

// `dtrain run`'s command line and the job it makes (run_args.h).

#include "cli/run/run_args.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace dtrain::cli::run {
namespace {

// The job of a resolved `dtrain run`, before whose output the console shows and the instrumentation.
spec::Spec run_spec(const RunArgs& args, const Resolved& r) {
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
bool apply_console(spec::Spec& spec, const Resolved& r, const std::string& console, bool given) {
  using Console = spec::Spec::Logs::Console;
  switch (r.console) {
    case Resolved::Console::unchanged: break;
    case Resolved::Console::rank0: spec.logs.console = Console::rank0; break;
    case Resolved::Console::all: spec.logs.console = Console::all; break;
    case Resolved::Console::none: spec.logs.console = Console::none; break;
    case Resolved::Console::ranks:
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

}  // namespace

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

void add_run_options(CLI::App& cmd, RunArgs& args) {
  cmd.add_option("--nodes", args.nodes, "simulated nodes on this machine (provider local)")->capture_default_str();
  cmd.add_option("--grace-s", args.grace_s, "seconds between SIGTERM and SIGKILL when stopping")->capture_default_str();
  cmd.add_option("--name", args.name, "job name (default: from the program name)");
  cmd.add_option("--logs-dir", args.logs_dir, "where per-rank logs go")->capture_default_str();
  cmd.add_option("--console", args.console, "whose output to show: rank0 | all | none")->capture_default_str();
  cmd.add_option("--instrument", args.instrument,
                 "health.instrument: auto (a PyTorch script reports its steps with no change to it) | off")
      ->capture_default_str();
  add_torchrun_options(cmd, args.torchrun);
  cmd.add_option("command", args.command,
                 "the program and its arguments: script.py ARGS (Python), -m MODULE ARGS, --no-python PROG ARGS, or "
                 "-- CMD ARGS (as it is)");
  // Everything from the first positional on is the program's (torchrun's rule): `run -n 2 train.py --lr 1` passes
  // --lr to train.py.
  cmd.positionals_at_end();
}

std::optional<RunJob> resolve_run_job(RunArgs& args, const CLI::App& cmd) {
  // `--` before the program leaves it in the remaining arguments.
  const auto remaining = cmd.remaining();
  const bool dashdash = std::find(remaining.begin(), remaining.end(), "--") != remaining.end();
  const bool console_given = cmd.count("--console") > 0;
  Resolved r;
  r.error = apply_torchrun_environment(cmd, args.torchrun, [](const char* name) { return std::getenv(name); });
  if (r.error.empty()) {
    r = resolve(args.torchrun, args.command, dashdash, args.nodes, console_given, HostFacts::current());
  }
  if (!r.error.empty()) {
    std::fprintf(stderr, "%s\n", r.error.c_str());
    return std::nullopt;
  }
  for (const auto& note : r.notes) std::fprintf(stderr, "dtrain run: %s\n", note.c_str());
  spec::Spec spec = run_spec(args, r);
  if (!apply_console(spec, r, args.console, console_given)) return std::nullopt;
  if (args.instrument == "off") {
    spec.health.instrument = spec::Spec::Health::Instrument::off;
  } else if (args.instrument != "auto") {
    std::fprintf(stderr, "dtrain run: --instrument must be auto or off (got '%s')\n", args.instrument.c_str());
    return std::nullopt;
  }
  try {
    spec::validate(spec);
  } catch (const spec::SpecError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return std::nullopt;
  }
  return RunJob{std::move(spec), std::move(r)};
}

}  // namespace dtrain::cli::run

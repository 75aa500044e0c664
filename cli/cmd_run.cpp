// `dtrain run -n N [--nodes M] [--max-restarts R] -- CMD ARGS...`: a job without a spec file; and, on one node,
// torchrun's command line: `dtrain run --standalone --nproc_per_node=2 train.py ARGS` (cli/run/torchrun_options.h
// says what each torchrun option does). The program comes after the options: with `--` it runs as it is; without,
// as under torchrun (a script or -m MODULE under Python, --no-python the program itself). -n and --nproc-per-node are
// one option (N | cpu | auto | gpu); --nodes M is dtrain's simulated nodes on this machine, --nnodes real hosts (1).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/run/multi_node.h"
#include "cli/run/node_console.h"
#include "cli/run/run_args.h"
#include "cli/run/torchrun_options.h"

namespace dtrain::cli {
namespace {

struct RunArgs {
  run::RunArgs run;
  std::string tune;  // --tune FILE: a tune overlay (cli/tune/overlay.h)
  bool dry_run = false;
  LaunchFlags flags;
};

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
  std::optional<run::RunJob> job = run::resolve_run_job(args.run, cmd);
  if (!job) return 2;
  if (!apply_tune_or_report(args.tune, job->spec)) return 2;
  if (args.dry_run) return print_dry_run(job->spec);
  if (job->resolved.multi) return run_nodes(std::move(job->spec), job->resolved, args.flags);
  return run_one_node(std::move(job->spec), job->resolved, args.flags);
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run a program as N workers per node without a spec file, with torchrun's "
                                       "options: on this node, or the same command on every node (--nnodes, "
                                       "--node-rank, --rdzv-endpoint)");
  cmd->add_option("--tune", args->tune, "a tune overlay (tune.yaml): DataLoader, DDP, thread and NCCL knobs applied "
                                        "to an unmodified PyTorch script; needs --instrument auto");
  cmd->add_flag("--dry-run", args->dry_run, "print the plan; start nothing");
  add_launch_flags(*cmd, args->flags);
  run::add_run_options(*cmd, args->run);
  return [args, cmd]() { return run_command(*args, *cmd); };
}

}  // namespace dtrain::cli

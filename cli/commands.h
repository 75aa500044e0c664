#pragma once

// One file per subcommand (cmd_<name>.cpp). Each adds its subcommand to the app and returns the action that
// runs it once the command line parsed; the action returns the process exit code. What several subcommands share
// (launching a job, running an agent, the termination signals) is in cli/launching/launching.h.

#include <functional>

#include <CLI/CLI.hpp>

#include "cli/launching/launching.h"

namespace dtrain::cli {

using Action = std::function<int()>;

// `--tune FILE` of launch and run: reads the overlay (cli/tune/overlay.h) and puts it into the validated `spec`,
// saying on stderr which variables it sets; on a bad file or one that does not fit the job, prints why and returns
// false (the command then exits 2). "" = no overlay, true.
bool apply_tune_or_report(const std::string& file, spec::Spec& spec);

Action add_launch_command(CLI::App& app);
Action add_run_command(CLI::App& app);
Action add_validate_command(CLI::App& app);
Action add_agent_command(CLI::App& app);
Action add_secret_command(CLI::App& app);
Action add_topo_command(CLI::App& app);
Action add_doctor_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_plan_command(CLI::App& app);
Action add_status_command(CLI::App& app);
Action add_report_command(CLI::App& app);
Action add_tune_command(CLI::App& app);

}  // namespace dtrain::cli

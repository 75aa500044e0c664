#pragma once

// One file per subcommand (cmd_<name>.cpp). Each adds its subcommand to the app and returns the action that
// runs it once the command line parsed; the action returns the process exit code.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/run/torchrun_options.h"
#include "cli/spec/spec.h"

namespace dtrain::agent {
struct AgentOptions;
}  // namespace dtrain::agent

namespace dtrain::cli {

using Action = std::function<int()>;

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

// Blocks SIGINT, SIGTERM and SIGHUP and starts the thread that receives them. Call before any other thread
// starts, so that no thread receives them asynchronously.
void block_termination_signals();
// Where received signals go from now on; a signal that arrived before a handler was set is delivered at once.
void on_termination_signal(std::function<void(int)> handler);

// The body of `dtrain agent`, shared with `dtrain run` on a node that joins a multi-node job: runs a node agent with
// `options` until it ends (signals go to it); returns its exit code. set_live_topology puts this node's scanned
// topology in its hello.
int run_agent(agent::AgentOptions& options, bool quiet);
bool set_live_topology(agent::AgentOptions& options);

// Launcher flags shared by launch and run.
struct LaunchFlags {
  bool insecure = false;      // plaintext to agents off loopback
  std::string secret_dir;     // cluster secret directory ("" = default)
};
void add_launch_flags(CLI::App& cmd, LaunchFlags& flags);

// Reads and validates a spec file with its --set overrides. On an invalid spec prints every error (file:line:col,
// key, fix) on stderr and returns nothing: the command then exits 2. Shared by launch, validate and doctor.
std::optional<spec::Spec> load_spec_or_report(const std::string& file, const std::vector<std::string>& sets);

// Runs a validated spec with the controller (signals forwarded); returns the exit code. Shared by launch and run.
int launch_job(spec::Spec spec, const LaunchFlags& flags);
// Prints the plan of `spec` as it would run on this machine's agents; starts nothing.
int print_dry_run(const spec::Spec& spec);
// `dtrain run --nnodes N`: this node's part (cmd_run_nodes.cpp). `spec` is the validated job of provider join;
// `run` says this node's part (run.multi) and --log-dir; `console`: run::node_console_text's filter of its lines.
int run_multi_node(spec::Spec spec, const run::Resolved& run, const std::string& console, const LaunchFlags& flags);

// Absolute path of the running dtrain binary (local agents are started from it).
std::string self_executable();

}  // namespace dtrain::cli

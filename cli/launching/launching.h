#pragma once

// What the subcommands share to start things: reading a spec, launching a job with the controller, running a node
// agent in this process, the termination signals, and this binary's own path. Defined with the subcommands that
// own them (cmd_launch.cpp, cmd_agent.cpp, main.cpp); declared here, below cli/'s top, so that cli/run/ (the
// multi-node path of `dtrain run`) uses them without including cli/commands.h.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/spec/spec.h"

namespace dtrain::agent {
struct AgentOptions;
}  // namespace dtrain::agent

namespace dtrain::cli {

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
// Absolute path of the running dtrain binary (local agents are started from it).
std::string self_executable();

}  // namespace dtrain::cli

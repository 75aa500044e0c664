// `dtrain run --nnodes N ...`: this node's part of a multi-node job, the same command on every node (torchrun's way).
// The node that runs the launcher (torchrun_options.h says which) launches the job with provider join listening on
// the endpoint and starts an agent of its own that joins it; every other node runs an agent in this process that
// joins the launcher, shows its own ranks' lines, exits with the job's exit code, and turns Ctrl-C into a stop of the
// whole job (AgentOptions::job_command).

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "agent/agent.h"
#include "cli/commands.h"
#include "cli/run/node_console.h"

namespace dtrain::cli {
namespace {

// The agent of the launcher's node, as a child in a process group of its own (Ctrl-C on the terminal reaches the
// launcher alone, which stops the job) that dies with this process. Returns its pid, or -1 having said why.
pid_t start_own_agent(const std::vector<std::string>& words) {
  const pid_t parent = ::getpid();
  std::vector<char*> argv;
  for (const auto& w : words) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("dtrain run: cannot start this node's agent: fork");
    return -1;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::execv(argv[0], argv.data());
    std::perror("dtrain run: cannot start this node's agent");
    ::_exit(127);
  }
  return pid;
}

// Waits up to `wait` for the agent to leave by itself (it does once the launcher's Shutdown ended its session), then
// SIGTERM (it stops its workers), then SIGKILL.
void end_own_agent(pid_t pid, std::chrono::milliseconds wait, std::chrono::milliseconds grace) {
  const auto gone_within = [pid](std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    do {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < until);
    return false;
  };
  if (gone_within(wait)) return;
  ::kill(pid, SIGTERM);
  if (gone_within(grace + std::chrono::seconds(5))) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

int run_launcher_node(spec::Spec spec, const run::Resolved::MultiNode& node, const std::string& console,
                      const LaunchFlags& flags, const std::string& run_dir) {
  std::vector<std::string> words = {self_executable(), "agent", "--join", node.endpoint, "--listen", "0.0.0.0:0",
                                    "--join-timeout-s",
                                    std::to_string(static_cast<long long>(std::ceil(spec.nodes.join_timeout_s))),
                                    "--run-dir", run_dir, "--quiet", "--job-command", "--console-ranks", console,
                                    // Without --node-rank the launcher's node is node 0: MASTER_ADDR is its address.
                                    "--slot", std::to_string(node.node_rank.value_or(0))};
  if (flags.insecure) words.push_back("--insecure");
  if (!flags.secret_dir.empty()) {
    words.push_back("--secret-dir");
    words.push_back(flags.secret_dir);
  }
  const auto grace = spec::duration_ms(spec.stop.grace_s);
  const pid_t agent = start_own_agent(words);
  if (agent < 0) return 1;
  const int code = launch_job(std::move(spec), flags);
  end_own_agent(agent, std::chrono::seconds(5), grace);
  return code;
}

int run_joining_node(const spec::Spec& spec, const run::Resolved::MultiNode& node, const std::string& console,
                     const LaunchFlags& flags, const std::string& run_dir) {
  agent::AgentOptions options;
  options.join = node.endpoint;
  options.listen = "0.0.0.0:0";
  options.join_timeout = spec::duration_ms(spec.nodes.join_timeout_s);
  options.insecure = flags.insecure;
  options.secret_dir = flags.secret_dir;
  options.run_dir = run_dir;
  options.slot = node.node_rank;
  options.job_command = true;
  options.console = run::node_console(console);
  options.default_grace = spec::duration_ms(spec.stop.grace_s);
  if (!set_live_topology(options)) return 2;
  std::fprintf(stderr, "dtrain run: joining the job at %s%s; the launcher's node runs the command it was given\n",
               node.endpoint.c_str(),
               node.node_rank ? (" as node " + std::to_string(*node.node_rank)).c_str() : " (node rank: join order)");
  return run_agent(options, true);
}

}  // namespace

int run_multi_node(spec::Spec spec, const run::Resolved::MultiNode& node, const std::string& console,
                   const LaunchFlags& flags) {
  const std::string run_dir = std::filesystem::absolute(spec.logs.dir).lexically_normal().string();
  if (node.launcher) return run_launcher_node(std::move(spec), node, console, flags, run_dir);
  return run_joining_node(spec, node, console, flags, run_dir);
}

}  // namespace dtrain::cli

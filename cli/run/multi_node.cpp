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
#include <memory>
#include <utility>
#include <thread>

#include "agent/agent.h"
#include "cli/run/multi_node.h"
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

// --log-dir: this node's ranks of the job in `run_dir` (first_rank on), laid out as torchrun does.
void write_node_logs(const run::Resolved& r, const std::string& run_dir, const std::string& job_id,
                     std::uint32_t first_rank) {
  if (r.log_dir.empty()) return;
  if (job_id.empty()) {
    std::fprintf(stderr, "dtrain run: --log-dir %s: no job ran on this node, so there are no logs to lay out\n",
                 r.log_dir.c_str());
    return;
  }
  run::lay_out_torchrun_logs(r, (std::filesystem::path(run_dir) / job_id).string(), job_id,
                             static_cast<int>(first_rank));
}

int run_launcher_node(spec::Spec spec, const run::Resolved& r, const std::string& console, const LaunchFlags& flags,
                      const std::string& run_dir) {
  const run::Resolved::MultiNode& node = *r.multi;
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
  const std::string prefix = spec.name + "-";
  const auto before = run::job_dirs(run_dir, prefix);
  const pid_t agent = start_own_agent(words);
  if (agent < 0) return 1;
  const int code = launch_job(std::move(spec), flags);
  end_own_agent(agent, std::chrono::seconds(5), grace);
  if (!r.log_dir.empty()) {
    // The launcher's node is node 0 (the launcher runs on node rank 0, or on the only node with a slot).
    std::string job_id;
    for (const auto& id : run::job_dirs(run_dir, prefix)) {
      if (!before.count(id)) job_id = id;
    }
    write_node_logs(r, run_dir, job_id, node.node_rank.value_or(0) * static_cast<std::uint32_t>(r.nproc));
  }
  return code;
}

int run_joining_node(const spec::Spec& spec, const run::Resolved& r, const std::string& console,
                     const LaunchFlags& flags, const std::string& run_dir) {
  const run::Resolved::MultiNode& node = *r.multi;
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
  // The job and this node's first rank at its first round, for --log-dir (set on the session's thread, read after
  // run_agent returned).
  auto job = std::make_shared<std::pair<std::string, std::uint32_t>>();
  options.on_group = [job](const std::string& id, std::uint32_t first_rank) {
    if (job->first.empty()) *job = {id, first_rank};
  };
  if (!set_live_topology(options)) return 2;
  std::fprintf(stderr, "dtrain run: joining the job at %s%s; the launcher's node runs the command it was given\n",
               node.endpoint.c_str(),
               node.node_rank ? (" as node " + std::to_string(*node.node_rank)).c_str() : " (node rank: join order)");
  const int code = run_agent(options, true);
  write_node_logs(r, run_dir, job->first, job->second);
  return code;
}

}  // namespace

int run_multi_node(spec::Spec spec, const run::Resolved& r, const std::string& console, const LaunchFlags& flags) {
  const std::string run_dir = std::filesystem::absolute(spec.logs.dir).lexically_normal().string();
  if (r.multi->launcher) return run_launcher_node(std::move(spec), r, console, flags, run_dir);
  return run_joining_node(spec, r, console, flags, run_dir);
}

}  // namespace dtrain::cli

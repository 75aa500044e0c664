// JobRunner's answers about its workers as reporters (job_runner.h): whether a health report may speak for a rank
// (its tokens, its sending process), the round's token, the dump signal a worker announced, and where each running
// worker's stacks go when a health check fails. Apart from the job's lifecycle (job_runner.cpp); the same object and
// lock.

#include <csignal>

#include "agent/job/job_runner.h"
#include "agent/security/x509.h"

namespace dtrain::agent {

Status JobRunner::check_reporter(std::uint32_t rank, const std::string& report_token) const {
  std::lock_guard lock(mutex_);
  auto it = workers_.find(rank);
  if (it == workers_.end()) {
    return {StatusCode::permission_denied,
            "rank " + std::to_string(rank) + " is not a worker of this node in this round"};
  }
  if (!security::x509::constant_time_equal(report_token, it->second.report_token)) {
    return {StatusCode::permission_denied,
            "the dtrain-report-token metadata is not rank " + std::to_string(rank) +
                "'s DTRAIN_REPORT_TOKEN: a worker reports only as itself (its RANK, with its own DTRAIN_REPORT_TOKEN)"};
  }
  return {};
}

Status JobRunner::check_sender(std::uint32_t rank, pid_t sender) const {
  std::lock_guard lock(mutex_);
  const auto it = workers_.find(rank);
  const pid_t worker = it == workers_.end() ? 0 : it->second.pid;
  if (worker != 0 && worker == sender) return {};
  return {StatusCode::failed_precondition,
          "sent by pid " + std::to_string(sender) + ", not by rank " + std::to_string(rank) + "'s worker process (pid " +
              std::to_string(worker) + "): only the process the agent started reports for its rank, not its " +
              "children (DataLoader workers, subprocesses); a wrapper script should end with `exec` so that its " +
              "program is that process"};
}

std::string JobRunner::current_token() const {
  std::lock_guard lock(mutex_);
  return round_token_;
}

void JobRunner::note_dump_signal(std::uint32_t rank, pid_t sender, std::uint32_t signal) {
  const bool harmless = signal == SIGUSR1 || signal == SIGUSR2 ||
                        (signal >= static_cast<std::uint32_t>(SIGRTMIN) && signal <= static_cast<std::uint32_t>(SIGRTMAX));
  std::lock_guard lock(mutex_);
  const auto it = workers_.find(rank);
  if (it == workers_.end() || it->second.pid == 0 || it->second.pid != sender) return;
  it->second.dump_signal = harmless ? static_cast<int>(signal) : 0;
}

std::vector<StackTarget> JobRunner::stack_targets(std::uint32_t round) const {
  std::lock_guard lock(mutex_);
  std::vector<StackTarget> targets;
  if (round != round_) return targets;
  for (const auto& [rank, w] : workers_) {
    if (w.exited || w.pid == 0) continue;
    StackTarget target{rank, w.pid, {}, {}, w.dump_signal, w.dump_signal != 0 ? w.stacks_file : ""};
    const std::string name = "attempt_" + std::to_string(round) + "/stacks/rank_" + std::to_string(rank) + ".txt";
    Result<std::string> placed = job_files_.place(name, "rank " + std::to_string(rank) + "'s stacks");
    if (placed.ok()) {
      target.path = std::move(placed.value);
    } else {
      target.error = placed.status.message();
    }
    targets.push_back(std::move(target));
  }
  return targets;
}

}  // namespace dtrain::agent

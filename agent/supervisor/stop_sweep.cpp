#include "agent/supervisor/stop_sweep.h"

#include <csignal>

#include "agent/supervisor/process_tree.h"

namespace dtrain::supervisor {

void StopSweep::begin(std::chrono::milliseconds grace, Done done, Clock::time_point now) {
  if (done) done_.push_back(std::move(done));
  if (active()) return;
  termed_.clear();
  termed_groups_.clear();
  killed_.clear();
  phase_ = Phase::kTerm;
  grace_end_ = now + grace;
  if (grace <= std::chrono::milliseconds::zero()) escalate(now);
}

void StopSweep::escalate(Clock::time_point now) {
  if (phase_ == Phase::kKill || !active()) return;
  phase_ = Phase::kKill;
  kill_started_ = now;
}

std::size_t StopSweep::signal(const std::vector<pid_t>& worker_groups, const std::set<pid_t>& keepers,
                              Clock::time_point now) {
  if (phase_ == Phase::kTerm && now >= grace_end_) escalate(now);
  last_pass_ = now;
  if (phase_ == Phase::kTerm) {
    // One SIGTERM per process (a second one can cut a worker's own cleanup short): a group signal to new worker
    // groups, then the scan for everything outside those groups (setsid, double-forked, reparented). SIGCONT right
    // after each, as systemd and Slurm do: a stopped process (SIGSTOP, a job-control stop, the tracee of a gdb that
    // was killed) would otherwise hold its SIGTERM pending until the grace period ends in SIGKILL.
    for (const pid_t group : worker_groups) {
      if (termed_groups_.insert(group).second) {
        kill(-group, SIGTERM);
        kill(-group, SIGCONT);
      }
    }
    std::set<pid_t> skip = termed_;
    skip.insert(keepers.begin(), keepers.end());
    const SignalledProcesses result = signal_descendants(root_, SIGTERM, skip, termed_groups_, SIGCONT);
    termed_.insert(result.signalled.begin(), result.signalled.end());
    return result.found;
  }
  // The scan goes first: it sees each process while it is alive, so the SIGKILL count is exact. The group signal
  // after it reaches members forked since the scan.
  const SignalledProcesses result = signal_descendants(root_, SIGKILL, keepers);
  killed_.insert(result.signalled.begin(), result.signalled.end());
  for (const pid_t group : worker_groups) kill(-group, SIGKILL);
  return result.found;
}

StopSweep::Clock::time_point StopSweep::next_deadline() const {
  return phase_ == Phase::kTerm ? grace_end_ : last_pass_ + kKillRepeat;
}

bool StopSweep::gave_up(Clock::time_point now) const {
  return phase_ == Phase::kKill && now - kill_started_ >= kGiveUpAfterKill;
}

std::vector<StopSweep::Done> StopSweep::finish(unsigned& sigkilled) {
  sigkilled = static_cast<unsigned>(killed_.size());
  phase_ = Phase::kIdle;
  std::vector<Done> done;
  done.swap(done_);
  return done;
}

}  // namespace dtrain::supervisor

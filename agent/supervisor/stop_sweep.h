#pragma once
// The state of one stop_all: SIGTERM to everything below us, SIGKILL after the grace period to whatever remains,
// repeated until nothing is left.
//
//   idle --begin(grace>0)--> term --grace over--> kill --nothing left / gave up--> idle (callbacks run)
//   idle --begin(grace=0)----------------------> kill
//
// The owner calls signal() whenever the tree may have changed (after reaping) and at next_deadline().

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <set>
#include <vector>

namespace dtrain::supervisor {

class StopSweep {
 public:
  using Clock = std::chrono::steady_clock;
  using Done = std::function<void(unsigned sigkilled)>;
  // Between SIGKILL passes while something survives (a process in uninterruptible sleep takes time to die, and a
  // pass catches forks that raced the previous one).
  static constexpr std::chrono::milliseconds kKillRepeat{100};
  // A process still there this long after the first SIGKILL cannot be killed (stuck in the kernel, e.g. in a
  // driver); the sweep then ends anyway so the agent does not hang with it.
  static constexpr std::chrono::seconds kGiveUpAfterKill{10};

  explicit StopSweep(pid_t root) : root_(root) {}

  bool active() const { return phase_ != Phase::kIdle; }
  // Starts a sweep, or adds `done` to the running one. A null `done` is allowed.
  void begin(std::chrono::milliseconds grace, Done done, Clock::time_point now);
  // Skips what is left of the grace period (the supervisor is being destroyed).
  void escalate(Clock::time_point now);
  // Signals what is alive now: in the term phase SIGTERM to processes and worker groups not yet sent one, in the
  // kill phase SIGKILL to all. `worker_groups`: process groups of workers whose exit is not known yet (unreaped:
  // their keepers report an exit before they reap it). `keepers` are never signalled (keeper.h): each exits by
  // itself once its tree is empty, and its worker's exit status must reach us first. Returns how many descendants
  // the scan found, keepers included (0: nothing left below root).
  std::size_t signal(const std::vector<pid_t>& worker_groups, const std::set<pid_t>& keepers, Clock::time_point now);
  // When signal() must run again even if no process exits.
  Clock::time_point next_deadline() const;
  bool gave_up(Clock::time_point now) const;
  // Ends the sweep: returns its callbacks; `sigkilled` = distinct living processes that were sent SIGKILL.
  std::vector<Done> finish(unsigned& sigkilled);

 private:
  enum class Phase { kIdle, kTerm, kKill };

  pid_t root_;
  Phase phase_ = Phase::kIdle;
  Clock::time_point grace_end_{};
  Clock::time_point kill_started_{};
  Clock::time_point last_pass_{};
  std::set<pid_t> termed_;         // processes sent SIGTERM (each gets one: a second may cut its cleanup short)
  std::set<pid_t> termed_groups_;  // worker groups sent SIGTERM
  std::set<pid_t> killed_;         // processes sent SIGKILL
  std::vector<Done> done_;
};

}  // namespace dtrain::supervisor

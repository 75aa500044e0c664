#pragma once

// Launching one trial of `dtrain tune` (session.h's TrialLauncher): the controller runs the trial's job to its end as
// `dtrain launch` would, with the launcher's terminal output (its notes and the workers' lines) sent to
// <trial run dir>.console, so that the terminal shows the tuning's own lines; a watchdog stops the job at the
// trial's deadline (SIGTERM to the workers, as Ctrl-C would, then at once after stop.grace_s). Each rank's trial
// line is read from its log in the run directory (attempt_0/rank_<R>.log), or, for a rank whose log is on another
// node, from the console capture (every rank's lines reach the launcher).

#include <atomic>
#include <chrono>
#include <mutex>

#include "cli/controller/controller.h"
#include "cli/tune/session.h"

namespace dtrain::tune {

class TrialLaunches {
 public:
  explicit TrialLaunches(controller::ControllerOptions options) : options_(std::move(options)) {}

  TrialRun launch(const spec::Spec& spec, std::chrono::steady_clock::time_point deadline);

  // From the signal thread: stops the running trial, and every later one is refused (interrupted).
  void signal(int signal);
  bool interrupted() const { return interrupted_; }

 private:
  controller::ControllerOptions options_;
  std::mutex mu_;
  controller::Controller* current_ = nullptr;
  std::atomic<bool> interrupted_{false};
};

}  // namespace dtrain::tune

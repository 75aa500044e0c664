#pragma once

// The launcher's signals: the first SIGINT/SIGTERM/SIGHUP stops every worker with stop.grace_s, a second one at
// once; from the first one on, every wait ends by the exit deadline.

#include <algorithm>
#include <chrono>
#include <optional>

namespace dtrain::controller {

class Interrupts {
 public:
  using Clock = std::chrono::steady_clock;

  // `grace`: stop.grace_s; `margin`: Timeouts::exit_margin.
  Interrupts(std::chrono::milliseconds grace, std::chrono::milliseconds margin) : grace_(grace), margin_(margin) {}

  // Records a signal received at `now`. True for the first one (the caller says what happens).
  bool on_signal(int signal, Clock::time_point now) {
    ++count_;
    const auto by = count_ == 1 ? now + grace_ + margin_ : now + margin_ / 2;
    exit_by_ = exit_by_ ? std::min(*exit_by_, by) : by;
    if (first_ != 0) return false;
    first_ = signal;
    return true;
  }

  bool interrupted() const { return first_ != 0; }
  int first_signal() const { return first_; }
  int count() const { return count_; }
  std::optional<Clock::time_point> exit_by() const { return exit_by_; }
  // `deadline`, or earlier when a signal set the exit deadline.
  Clock::time_point bounded(Clock::time_point deadline) const {
    return exit_by_ ? std::min(deadline, *exit_by_) : deadline;
  }

 private:
  std::chrono::milliseconds grace_;
  std::chrono::milliseconds margin_;
  int first_ = 0;
  int count_ = 0;
  std::optional<Clock::time_point> exit_by_;
};

}  // namespace dtrain::controller

#pragma once

// When a round fails, may the job run again, and after how long? Kept apart from the controller so the rule is
// one small object with its own tests.

#include <chrono>

namespace dtrain::controller {

class RestartPolicy {
 public:
  // `max_restarts`: rounds that may follow the first; `backoff`: wait before each restart.
  RestartPolicy(int max_restarts, std::chrono::milliseconds backoff) : max_restarts_(max_restarts), backoff_(backoff) {}

  // True when another round may start after `restarts_done` restarts have already happened.
  bool may_restart(int restarts_done) const { return restarts_done < max_restarts_; }
  // The same backoff before every restart: the failures this guards against (a node rebooting, a port in
  // TIME_WAIT) do not get better with exponential waits, and users read the spec's number literally.
  std::chrono::milliseconds backoff() const { return backoff_; }
  int max_restarts() const { return max_restarts_; }

 private:
  int max_restarts_;
  std::chrono::milliseconds backoff_;
};

}  // namespace dtrain::controller

// Supervisor::Impl: stop_all and shutdown (see supervisor_impl.h).

#include "agent/supervisor/supervisor_impl.h"

#include <sys/timerfd.h>

#include <set>
#include <vector>

namespace dtrain::supervisor {

void Supervisor::Impl::begin_stop(std::chrono::milliseconds grace, std::function<void(unsigned)> done) {
  stop.begin(grace, std::move(done), Clock::now());
  advance_stop();
}

void Supervisor::Impl::advance_stop() {
  if (!stop.active()) return;
  const Clock::time_point now = Clock::now();
  std::vector<pid_t> groups;
  groups.reserve(live.size());
  for (const auto& [pid, serial] : live) groups.push_back(pid);
  // Keepers end by themselves; the namespace's holder is never signalled (its death would SIGKILL every worker at
  // once) and outlives the stop, so it is not counted among what is left.
  std::set<pid_t> spared;
  for (const auto& [pid, watch] : keepers) spared.insert(pid);
  if (ns.active()) spared.insert(ns.holder);
  std::size_t found = stop.signal(groups, spared, now);
  if (ns.active() && found > 0) --found;
  if ((found == 0 && live.empty()) || stop.gave_up(now)) {
    finish_stop();
    return;
  }
  arm_timer(stop.next_deadline());
}

void Supervisor::Impl::finish_stop() {
  arm_timer(Clock::time_point{});
  // Every writer is gone, so the pipes hold their last bytes and then EOF.
  std::vector<std::uint64_t> serials;
  for (const auto& [serial, worker] : workers) {
    if (worker->exit_reported) serials.push_back(serial);
  }
  for (const std::uint64_t serial : serials) {
    const auto it = workers.find(serial);
    if (it == workers.end()) continue;
    Worker& worker = *it->second;
    drain(worker, kDrainBudget);
    worker.output->flush_partial(sink_for(worker.id));
    for (const Stream stream : {Stream::kStdout, Stream::kStderr}) {
      loop.remove(worker.tokens[static_cast<int>(stream)]);
      worker.output->close(stream);
    }
    workers.erase(serial);
  }
  // Nothing is left in the namespace but its holder.
  if (live.empty()) end_namespace();
  unsigned sigkilled = 0;
  const std::vector<StopSweep::Done> callbacks = stop.finish(sigkilled);
  if (shutting_down) {
    quit = true;
    return;
  }
  for (const auto& done : callbacks) done(sigkilled);
}

void Supervisor::Impl::arm_timer(Clock::time_point deadline) {
  itimerspec spec{};
  if (deadline != Clock::time_point{}) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    // A zero it_value would disarm: a deadline already past still has to fire.
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  }
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock of timer_fd.
  timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void Supervisor::Impl::begin_shutdown() {
  shutting_down = true;
  events = Events{};
  shutdown_deadline = Clock::now() + kShutdownTimeout;
  stop.begin(std::chrono::milliseconds(0), nullptr, Clock::now());
  stop.escalate(Clock::now());
  advance_stop();
}

}  // namespace dtrain::supervisor

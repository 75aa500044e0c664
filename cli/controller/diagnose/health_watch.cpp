#include "cli/controller/diagnose/health_watch.h"

#include <algorithm>
#include <cstdio>

namespace dtrain::controller {
namespace {

// "30.0 s": one decimal, as people read timeouts.
std::string seconds(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

// A spec value as it was written: "30", "0.5".
std::string setting(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

// How long a worker may stay quiet when the start-up check is off: torch's default process-group timeout (30
// minutes), after which its init_process_group raises by itself.
constexpr std::chrono::milliseconds kQuietLimitWithoutStartup{30 * 60 * 1000};
// The shortest time without CPU that judges a quiet worker idle: CPU time is counted in 10 ms ticks, and a wait for a
// late peer uses one every few seconds (health_watch.h).
constexpr std::chrono::milliseconds kMinIdle{10'000};

}  // namespace

HealthWatch::HealthWatch(const spec::Spec::Health& limits)
    : heartbeat_(spec::duration_ms(limits.heartbeat_timeout_s)),
      hang_(spec::duration_ms(limits.hang_timeout_s)),
      startup_(spec::duration_ms(limits.startup_timeout_s)),
      exit_(spec::duration_ms(limits.exit_timeout_s)),
      quiet_limit_(startup_.count() > 0 ? startup_ : kQuietLimitWithoutStartup) {}

HealthWatch::Worker& HealthWatch::worker(unsigned rank, Clock::time_point now) {
  auto [it, added] = workers_.try_emplace(rank);
  // A report may overtake its worker's WorkerStarted (they travel different paths to the agent's session).
  if (added) it->second.started_at = now;
  return it->second;
}

void HealthWatch::started(unsigned rank, Clock::time_point now) { note_due(worker(rank, now)); }

void HealthWatch::reported(const WorkerHealth& h, Clock::time_point now) {
  Worker& w = worker(h.rank, now);
  if (w.exited) return;
  const bool first = !w.last_report;
  const bool moved = first ? (h.steps_done > 0) : (h.step != w.step || h.steps_done != w.steps_done);
  if (first) w.first_step = h.step;
  w.last_report = now;
  w.step = h.step;
  w.steps_done = h.steps_done;
  if (h.quiet && !w.quiet) w.quiet_since = now;
  if (!h.quiet) w.quiet_since.reset();
  w.quiet = h.quiet;
  if (moved || (!w.progress_at && h.step != w.first_step)) w.progress_at = now;
  // For good, from the first: the reporter's thread may still send a heartbeat after the last report, until the
  // process stops it.
  if (h.exiting && !w.exiting_since) w.exiting_since = now;
  note_due(w);
}

void HealthWatch::exited(unsigned rank) { workers_[rank].exited = true; }

void HealthWatch::sampled(unsigned rank, char state, double cpu_seconds, Clock::time_point now) {
  const auto it = workers_.find(rank);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  if (cpu_seconds != w.cpu_seconds) {
    w.cpu_seconds = cpu_seconds;
    w.cpu_moved_at = now;
    note_due(w);
  }
  const bool stopped = state == 'T' || state == 't';
  if (!stopped) {
    w.stopped_since.reset();
  } else if (!w.stopped_since) {
    w.stopped_since = now;
    note_due(w);
  }
}

std::optional<HealthWatch::Due> HealthWatch::due(const Worker& w) const {
  if (w.exited || !w.last_report) return std::nullopt;
  if (w.exiting_since) {
    if (exit_.count() == 0) return std::nullopt;
    return Due{*w.exiting_since + exit_, HealthFailure::Check::teardown};
  }
  std::optional<Due> first;
  const auto consider = [&first](Clock::time_point at, HealthFailure::Check check) {
    if (!first || at < first->at) first = Due{at, check};
  };
  if (heartbeat_.count() > 0 && !w.quiet) consider(*w.last_report + heartbeat_, HealthFailure::Check::heartbeat);
  if (w.quiet && w.quiet_since) consider(*w.quiet_since + quiet_limit_, HealthFailure::Check::quiet);
  if (w.quiet && w.stopped_since && heartbeat_.count() > 0) {
    consider(std::max(*w.stopped_since, *w.last_report) + heartbeat_, HealthFailure::Check::stopped);
  }
  if (w.quiet && w.quiet_since && w.cpu_moved_at && heartbeat_.count() > 0) {
    consider(std::max(*w.cpu_moved_at, *w.quiet_since) + std::max(heartbeat_, kMinIdle), HealthFailure::Check::idle);
  }
  if (hang_.count() > 0 && w.progress_at) consider(*w.progress_at + hang_, HealthFailure::Check::hang);
  if (startup_.count() > 0 && !w.progress_at) consider(w.started_at + startup_, HealthFailure::Check::startup);
  return first;
}

void HealthWatch::note_due(const Worker& w) {
  if (auto d = due(w); d && d->at < promised_) due_sooner_ = true;
}

std::optional<HealthFailure> HealthWatch::check(Clock::time_point now) const {
  std::optional<Due> first;
  unsigned rank = 0;
  for (const auto& [r, w] : workers_) {
    if (auto d = due(w); d && d->at <= now && (!first || d->at < first->at)) {
      first = d;
      rank = r;
    }
  }
  if (!first) return std::nullopt;
  return HealthFailure{first->check, rank, describe(*first, workers_.at(rank), now)};
}

HealthWatch::Clock::time_point HealthWatch::next_deadline() {
  promised_ = Clock::time_point::max();
  for (const auto& [rank, w] : workers_) {
    if (auto d = due(w)) promised_ = std::min(promised_, d->at);
  }
  due_sooner_ = false;
  return promised_;
}

std::string HealthWatch::describe(const Due& due, const Worker& w, Clock::time_point now) const {
  switch (due.check) {
    case HealthFailure::Check::heartbeat:
      return "stopped reporting health " + seconds(now - *w.last_report) + " ago (health.heartbeat_timeout_s: " +
             setting(heartbeat_) + "): its process is stopped or wedged, since its reporter resends a heartbeat " +
             "even while a step runs (a Python reporter also stops inside a call that holds the interpreter lock, " +
             "as torch 1.13's init_process_group does while it waits for a late peer; its stacks show where)";
    case HealthFailure::Check::hang:
      return "made no step progress for " + seconds(now - *w.progress_at) + " (stuck at step " +
             std::to_string(w.step) + "; health.hang_timeout_s: " + setting(hang_) +
             "): a collective that never completes, or a deadlock; its stacks show where";
    case HealthFailure::Check::teardown:
      return "sent its last report (exiting) " + seconds(now - *w.exiting_since) +
             " ago and has not exited: it is stuck in teardown (health.exit_timeout_s: " + setting(exit_) +
             "); its stacks show where (a process group, a DDP reducer or the interpreter's finalization that never " +
             "returns); raise the timeout if teardown is this slow";
    case HealthFailure::Check::quiet:
      return "has been in a call that keeps its reporter from running (quiet: init_process_group, say) for " +
             seconds(now - *w.quiet_since) + " (the bound is " + setting(quiet_limit_) +
             " s: health.startup_timeout_s, or torch's 30-minute process-group timeout when that is 0): a peer that " +
             "never came, or a rendezvous that never completes; its stacks show where";
    case HealthFailure::Check::stopped:
      return "is stopped (its agent has seen its process in state T for " + seconds(now - *w.stopped_since) +
             ", health.heartbeat_timeout_s: " + setting(heartbeat_) + ") while its last report said quiet: " +
             "SIGSTOP, job control or a tracer holds it; a quiet wait for a late peer sleeps instead";
    case HealthFailure::Check::idle:
      return "has used no CPU time for " + seconds(now - std::max(*w.cpu_moved_at, *w.quiet_since)) +
             " (health.heartbeat_timeout_s: " + setting(heartbeat_) + ", 10 s at least) while its last report said " +
             "quiet: a deadlock (a wait for a late peer polls, and uses some); its stacks show where";
    case HealthFailure::Check::startup:
      break;
  }
  return "made no first step " + seconds(now - w.started_at) + " after it started (health.startup_timeout_s: " +
         setting(startup_) + "): stuck starting up (imports, data, communicator init); raise the timeout if start-up " +
         "is this slow";
}

}  // namespace dtrain::controller

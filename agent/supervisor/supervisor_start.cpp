// Supervisor::Impl: starting workers (see supervisor_impl.h).

#include "agent/supervisor/supervisor_impl.h"

#include <sys/epoll.h>

#include <filesystem>
#include <utility>

namespace dtrain::supervisor {

void Supervisor::Impl::start_all(const std::vector<ProcessSpec>& specs, std::size_t& begun) {
  // Every keeper is forked before the first is waited for: the keepers set up and exec their workers while this
  // thread forks the next ones, instead of one fork + exec round trip after the other. `started` events come in the
  // order of `specs`; a spec that fails before its fork (plan, log file, fork) is reported at once, so possibly
  // before the `started` of an earlier spec. `begun` counts the specs that were forked or reported; if this throws,
  // the rest were not.
  std::vector<PendingStart> pending;
  pending.reserve(specs.size());
  begun = 0;
  try {
    for (; begun < specs.size(); ++begun) {
      if (auto start = begin_start(specs[begun])) pending.push_back(std::move(*start));
    }
  } catch (...) {
    for (auto& start : pending) finish_start(start);
    throw;
  }
  for (auto& start : pending) finish_start(start);
}

void Supervisor::Impl::report_spawn_failure(const ProcessSpec& spec, pid_t pid, std::string error) {
  ProcessExit exit;
  exit.id = spec.id;
  exit.pid = pid;
  exit.exit_code = 127;
  exit.spawn_error = std::move(error);
  if (events.exited) events.exited(exit);
}

std::optional<Supervisor::Impl::PendingStart> Supervisor::Impl::begin_start(const ProcessSpec& spec) {
  if (shutting_down || stop.active()) {
    report_spawn_failure(spec, 0, "not started: stop_all is in progress (spawn again once it has finished)");
    return std::nullopt;
  }
  Result<LaunchPlan> planned = plan_launch(spec);
  if (!planned.ok()) {
    report_spawn_failure(spec, 0, planned.status.message());
    return std::nullopt;
  }
  ensure_namespace();
  if (ns.active()) {
    planned.value.pid_ns = ns.pid_ns;
    planned.value.mnt_ns = ns.mnt_ns;
    // Entering the mount namespace moves the child to its root: it must change back to ours.
    if (planned.value.working_dir.empty()) {
      std::error_code ec;
      planned.value.working_dir = std::filesystem::current_path(ec).string();
      if (ec) {
        report_spawn_failure(spec, 0, "cannot start '" + spec.argv[0] + "': the agent's working directory is gone (" +
                                          ec.message() + "); give the job a working_dir");
        return std::nullopt;
      }
    }
  }
  PendingStart start;
  start.spec = &spec;
  start.plan = std::make_unique<LaunchPlan>(std::move(planned.value));
  if (!spec.log_path.empty()) {
    Result<int> log = open_log_file(spec.log_path);
    if (!log.ok()) {
      report_spawn_failure(spec, 0, log.status.message());
      return std::nullopt;
    }
    start.log_fd = log.value;
  }
  Result<ForkedKeeper> forked = fork_keeper(*start.plan);
  if (!forked.ok()) {
    close_fd(start.log_fd);
    report_spawn_failure(spec, 0, forked.status.message());
    return std::nullopt;
  }
  start.keeper = forked.value;
  return start;
}

void Supervisor::Impl::finish_start(PendingStart& start) {
  const ProcessSpec& spec = *start.spec;
  std::unique_ptr<LaunchPlan>& plan = start.plan;
  int& log_fd = start.log_fd;
  Result<LaunchedChild> launched = await_keeper(start.keeper, *plan);
  if (!launched.ok()) {
    close_fd(log_fd);
    report_spawn_failure(spec, 0, launched.status.message());
    return;
  }
  LaunchedChild child = launched.value;
  const Clock::time_point started_at = Clock::now();
  const ExecReport verdict = await_exec(child.report_fd, *plan, kExecReportTimeout);
  if (verdict.outcome == ExecReport::Outcome::kFailed) {
    // The child exits with 127 right after its report; its keeper reaps it, then exits itself.
    close_fd(child.stdout_fd);
    close_fd(child.stderr_fd);
    close_fd(child.report_fd);
    close_fd(child.keeper_fd);
    close_fd(log_fd);
    track_keeper(child.keeper, 0);
    report_spawn_failure(spec, child.pid, verdict.error);
    return;
  }

  const std::uint64_t serial = next_serial++;
  auto worker = std::make_unique<Worker>();
  worker->id = spec.id;
  worker->pid = child.pid;
  worker->started_at = started_at;
  const std::uint64_t id = spec.id;
  worker->output = std::make_unique<OutputCapture>(
      child.stdout_fd, child.stderr_fd, log_fd, spec.log_path, spec.stderr_tail_lines,
      [this, id](const std::string& message) {
        if (events.log_failed) events.log_failed(id, message);
      });
  if (verdict.outcome == ExecReport::Outcome::kUndecided) {
    worker->report_fd = child.report_fd;
    worker->plan = std::move(plan);
  } else {
    close_fd(child.report_fd);
  }
  for (const Stream stream : {Stream::kStdout, Stream::kStderr}) {
    worker->tokens[static_cast<int>(stream)] = loop.add(
        worker->output->fd(stream), EPOLLIN, [this, serial, stream](std::uint32_t) { on_output(serial, stream); });
  }
  worker->keeper = child.keeper;
  worker->keeper_fd = child.keeper_fd;
  worker->keeper_token =
      loop.add(child.keeper_fd, EPOLLIN, [this, serial](std::uint32_t) { on_keeper_record(serial); });
  track_keeper(child.keeper, serial);
  live.emplace(child.pid, serial);
  workers.emplace(serial, std::move(worker));
  running.fetch_add(1);
  if (events.started) events.started(spec.id, child.pid);
}

}  // namespace dtrain::supervisor

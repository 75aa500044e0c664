// Supervisor::Impl: reaping workers and keepers and reporting exits (see supervisor_impl.h).

#include "agent/supervisor/supervisor_impl.h"

#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cerrno>

#include "agent/supervisor/process/keeper.h"

namespace dtrain::supervisor {

void Supervisor::Impl::reap_children() {
  signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
  }
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;  // 0: children left but none exited; -1/ECHILD: no children
    if (holder_reaped(pid)) continue;
    const auto it = live.find(pid);
    if (it == live.end()) {
      // A keeper (whose worker may still need us), or a stray child: an orphan reparented to us because its keeper
      // was killed, or a keeper that never reported. Reaping it is all there is to do for those.
      keeper_reaped(pid);
      continue;
    }
    const std::uint64_t serial = it->second;
    live.erase(it);
    if (WIFSIGNALED(status)) {
      on_worker_exit(serial, 128 + WTERMSIG(status), WTERMSIG(status));
    } else {
      on_worker_exit(serial, WEXITSTATUS(status), 0);
    }
  }
  advance_stop();
}

void Supervisor::Impl::on_worker_exited(std::uint64_t serial) {
  reap_children();
  const auto it = workers.find(serial);
  if (it == workers.end() || live.count(it->second->pid) == 0) return;
  // The pidfd says it exited, yet waitpid(-1) did not return it: its status was taken by a waitpid elsewhere in
  // this process (which the rules forbid). Report what is known rather than watch a readable pidfd forever.
  Worker& worker = *it->second;
  siginfo_t info{};
  const int rc = waitid(P_PIDFD, static_cast<id_t>(worker.pidfd), &info, WEXITED | WNOHANG);
  if (rc == 0 && info.si_pid != 0) {
    live.erase(worker.pid);
    if (info.si_code == CLD_EXITED) {
      on_worker_exit(serial, info.si_status, 0);
    } else {
      on_worker_exit(serial, 128 + info.si_status, info.si_status);
    }
  } else if (rc != 0 && errno == ECHILD) {
    live.erase(worker.pid);
    on_worker_exit(serial, -1, 0);
  }
  advance_stop();
}

void Supervisor::Impl::on_keeper_record(std::uint64_t serial) {
  const auto it = workers.find(serial);
  if (it == workers.end() || it->second->keeper_fd < 0) return;
  Worker& worker = *it->second;
  KeeperRecord record{};
  for (;;) {
    const ssize_t n = read(worker.keeper_fd, &record, sizeof record);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n != static_cast<ssize_t>(sizeof record)) {
      // EOF: the keeper is gone (a record is one atomic write, so there are no partial ones). keeper_reaped
      // decides what happens to a worker it did not report.
      loop.remove(worker.keeper_token);
      close_fd(worker.keeper_fd);
      return;
    }
    if (record.kind != KeeperRecord::kWorkerExited || record.pid != worker.pid || live.count(worker.pid) == 0) {
      continue;
    }
    live.erase(worker.pid);
    const int signal = record.code == CLD_EXITED ? 0 : record.value;
    on_worker_exit(serial, signal == 0 ? record.value : 128 + signal, signal);  // may forget the worker
    advance_stop();
    return;
  }
}

void Supervisor::Impl::track_keeper(pid_t keeper, std::uint64_t serial) {
  KeeperWatch watch;
  watch.serial = serial;
  watch.pidfd = static_cast<int>(syscall(SYS_pidfd_open, keeper, 0));
  if (watch.pidfd >= 0) {
    watch.token = loop.add(watch.pidfd, EPOLLIN, [this, keeper](std::uint32_t) { on_keeper_exited(keeper); });
  }
  keepers[keeper] = watch;
}

void Supervisor::Impl::on_keeper_exited(pid_t keeper) {
  reap_children();
  const auto it = keepers.find(keeper);
  if (it == keepers.end()) return;
  // As in on_worker_exited: exited, yet waitpid(-1) did not return it; do not watch a readable pidfd forever.
  siginfo_t info{};
  const int rc = waitid(P_PIDFD, static_cast<id_t>(it->second.pidfd), &info, WEXITED | WNOHANG);
  if ((rc == 0 && info.si_pid != 0) || (rc != 0 && errno == ECHILD)) keeper_reaped(keeper);
  advance_stop();
}

void Supervisor::Impl::keeper_reaped(pid_t keeper) {
  const auto it = keepers.find(keeper);
  if (it == keepers.end()) return;
  const KeeperWatch watch = it->second;
  keepers.erase(it);
  loop.remove(watch.token);
  if (watch.pidfd >= 0) close(watch.pidfd);
  // A record written just before the keeper ended may not have been read yet.
  on_keeper_record(watch.serial);
  const auto worker = workers.find(watch.serial);
  if (worker == workers.end() || live.count(worker->second->pid) == 0) return;
  // The keeper was killed before its worker ended: the worker, running or a zombie, is now our own child (we are
  // the next subreaper up), so the usual waitpid sees it; the pidfd catches its exit even if SIGCHLD went elsewhere.
  Worker& orphan = *worker->second;
  const std::uint64_t serial = watch.serial;
  orphan.pidfd = static_cast<int>(syscall(SYS_pidfd_open, orphan.pid, 0));
  if (orphan.pidfd >= 0) {
    orphan.pidfd_token = loop.add(orphan.pidfd, EPOLLIN, [this, serial](std::uint32_t) { on_worker_exited(serial); });
    return;
  }
  // Gone and reaped without a record (the keeper could not write it): report what is known rather than wait forever.
  live.erase(orphan.pid);
  on_worker_exit(serial, -1, 0);
}

void Supervisor::Impl::on_worker_exit(std::uint64_t serial, int exit_code, int signal) {
  Worker& worker = *workers.at(serial);
  running.fetch_sub(1);
  loop.remove(worker.pidfd_token);
  close_fd(worker.pidfd);
  loop.remove(worker.keeper_token);
  close_fd(worker.keeper_fd);

  ProcessExit exit;
  exit.id = worker.id;
  exit.pid = worker.pid;
  exit.exit_code = exit_code;
  exit.signal = signal;
  exit.stopped = stop.active();
  exit.runtime = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - worker.started_at);
  if (worker.report_fd >= 0) {
    const ExecReport verdict = await_exec(worker.report_fd, *worker.plan, std::chrono::milliseconds(0));
    if (verdict.outcome == ExecReport::Outcome::kFailed) exit.spawn_error = verdict.error;
    close_fd(worker.report_fd);
  }
  // Everything the process wrote is in its pipes by now: read it all before reporting the exit.
  drain(worker, kDrainBudget);
  worker.output->flush_partial(sink_for(worker.id));
  exit.stderr_tail = worker.output->stderr_tail();
  exit.log_error = worker.output->log_error();
  exit.log_bytes_lost = worker.output->log_bytes_lost();
  worker.exit_reported = true;
  forget_if_done(serial);
  if (events.exited) events.exited(exit);
}

}  // namespace dtrain::supervisor

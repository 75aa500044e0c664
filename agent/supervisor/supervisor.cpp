#include "agent/supervisor/supervisor.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "agent/supervisor/event_loop.h"
#include "agent/supervisor/keeper.h"
#include "agent/supervisor/output_capture.h"
#include "agent/supervisor/spawn.h"
#include "agent/supervisor/stop_sweep.h"

namespace dtrain::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using Stream = OutputCapture::Stream;

// Bytes read from one pipe per wakeup, so one chatty worker cannot starve the others.
constexpr std::size_t kReadBudget = 1 << 20;
// Bytes read from a pipe when its worker exited or the sweep ended: everything buffered, but bounded in case a
// surviving descendant keeps writing.
constexpr std::size_t kDrainBudget = 64 << 20;

std::atomic<bool> g_supervisor_exists{false};

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

void prepare_process() {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (const int err = pthread_sigmask(SIG_BLOCK, &chld, nullptr); err != 0) {
    throw std::system_error(err, std::generic_category(), "pthread_sigmask(SIGCHLD)");
  }
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  if (sigaction(SIGCHLD, &dfl, nullptr) != 0) throw_errno("sigaction(SIGCHLD)");
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) throw_errno("prctl(PR_SET_CHILD_SUBREAPER)");
}

// One started worker. Kept after it is reaped while a descendant still holds its pipes open.
struct Worker {
  std::uint64_t id = 0;
  pid_t pid = 0;
  Clock::time_point started_at;
  std::unique_ptr<OutputCapture> output;
  EventLoop::Token tokens[2] = {0, 0};  // stdout, stderr watches
  pid_t keeper = 0;                     // the worker's keeper (keeper.h), which reports its exit
  int keeper_fd = -1;                   // the keeper's records; closed at the exit record or the keeper's EOF
  EventLoop::Token keeper_token = 0;
  // Only when the keeper died without reporting the worker, which is then our child: readable at its exit.
  int pidfd = -1;
  EventLoop::Token pidfd_token = 0;
  int report_fd = -1;                   // exec verdict still pending when spawn() stopped waiting
  std::unique_ptr<LaunchPlan> plan;     // for describing that late verdict
  bool exit_reported = false;
};

struct Supervisor::Impl {
  explicit Impl(Events e) : events(std::move(e)), stop(getpid()) {}

  // --- loop thread ---
  void run();
  // A spec whose keeper is forked and whose worker's start is not known yet.
  struct PendingStart {
    const ProcessSpec* spec = nullptr;
    std::unique_ptr<LaunchPlan> plan;
    int log_fd = -1;
    ForkedKeeper keeper;
  };
  void start_all(const std::vector<ProcessSpec>& specs, std::size_t& begun);
  std::optional<PendingStart> begin_start(const ProcessSpec& spec);
  void finish_start(PendingStart& start);
  void report_spawn_failure(const ProcessSpec& spec, pid_t pid, std::string error);
  void on_output(std::uint64_t serial, Stream stream);
  void reap_children();
  void on_worker_exited(std::uint64_t serial);
  void on_keeper_record(std::uint64_t serial);
  void track_keeper(pid_t keeper, std::uint64_t serial);
  void on_keeper_exited(pid_t keeper);
  void keeper_reaped(pid_t keeper);
  void on_worker_exit(std::uint64_t serial, int exit_code, int signal);
  void drain(Worker& worker, std::size_t budget);
  void forget_if_done(std::uint64_t serial);
  void begin_stop(std::chrono::milliseconds grace, std::function<void(unsigned)> done);
  void advance_stop();
  void finish_stop();
  void arm_timer(Clock::time_point deadline);
  void begin_shutdown();
  OutputCapture::LineSink sink_for(std::uint64_t id);

  Events events;
  EventLoop loop;
  int signal_fd = -1;
  int timer_fd = -1;
  StopSweep stop;
  std::map<std::uint64_t, std::unique_ptr<Worker>> workers;  // by serial (pids are recycled, serials are not)
  std::unordered_map<pid_t, std::uint64_t> live;             // workers whose exit is not known: pid -> serial
  // Unreaped keepers: pid -> their worker's serial (0: none, its spawn failed). Never signalled by a stop: each
  // exits by itself once its tree is empty, after the worker's exit record.
  struct KeeperWatch {
    std::uint64_t serial = 0;
    int pidfd = -1;  // readable at the keeper's exit, even if its SIGCHLD went to another thread
    EventLoop::Token token = 0;
  };
  std::unordered_map<pid_t, KeeperWatch> keepers;
  std::uint64_t next_serial = 1;
  std::atomic<std::size_t> running{0};
  bool shutting_down = false;
  Clock::time_point shutdown_deadline{};
  bool quit = false;
  std::thread thread;
};

OutputCapture::LineSink Supervisor::Impl::sink_for(std::uint64_t id) {
  return [this, id](bool is_stderr, std::string_view line) {
    if (events.line) events.line(id, is_stderr, line);
  };
}

void Supervisor::Impl::run() {
  while (!quit) {
    int timeout_ms = -1;
    if (shutting_down) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(shutdown_deadline - Clock::now());
      if (left.count() <= 0) break;
      timeout_ms = static_cast<int>(left.count()) + 1;
    }
    loop.run_once(timeout_ms);
  }
}

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
  auto planned = plan_launch(spec);
  if (auto* error = std::get_if<std::string>(&planned)) {
    report_spawn_failure(spec, 0, std::move(*error));
    return std::nullopt;
  }
  PendingStart start;
  start.spec = &spec;
  start.plan = std::make_unique<LaunchPlan>(std::move(std::get<LaunchPlan>(planned)));
  if (!spec.log_path.empty()) {
    std::string error;
    start.log_fd = open_log_file(spec.log_path, error);
    if (start.log_fd < 0) {
      report_spawn_failure(spec, 0, std::move(error));
      return std::nullopt;
    }
  }
  auto forked = fork_keeper(*start.plan);
  if (auto* error = std::get_if<std::string>(&forked)) {
    close_fd(start.log_fd);
    report_spawn_failure(spec, 0, std::move(*error));
    return std::nullopt;
  }
  start.keeper = std::get<ForkedKeeper>(forked);
  return start;
}

void Supervisor::Impl::finish_start(PendingStart& start) {
  const ProcessSpec& spec = *start.spec;
  std::unique_ptr<LaunchPlan>& plan = start.plan;
  int& log_fd = start.log_fd;
  auto launched = await_keeper(start.keeper, *plan);
  if (auto* error = std::get_if<std::string>(&launched)) {
    close_fd(log_fd);
    report_spawn_failure(spec, 0, std::move(*error));
    return;
  }
  LaunchedChild child = std::get<LaunchedChild>(launched);
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

void Supervisor::Impl::on_output(std::uint64_t serial, Stream stream) {
  const auto it = workers.find(serial);
  if (it == workers.end()) return;
  Worker& worker = *it->second;
  if (worker.output->read(stream, kReadBudget, sink_for(worker.id)) == OutputCapture::ReadResult::kEof) {
    loop.remove(worker.tokens[static_cast<int>(stream)]);
    forget_if_done(serial);
  }
}

void Supervisor::Impl::drain(Worker& worker, std::size_t budget) {
  for (const Stream stream : {Stream::kStdout, Stream::kStderr}) {
    if (!worker.output->is_open(stream)) continue;
    if (worker.output->read(stream, budget, sink_for(worker.id)) == OutputCapture::ReadResult::kEof) {
      loop.remove(worker.tokens[static_cast<int>(stream)]);
    }
  }
}

void Supervisor::Impl::forget_if_done(std::uint64_t serial) {
  const auto it = workers.find(serial);
  if (it == workers.end()) return;
  const Worker& worker = *it->second;
  if (worker.exit_reported && !worker.output->is_open(Stream::kStdout) && !worker.output->is_open(Stream::kStderr)) {
    workers.erase(it);
  }
}

void Supervisor::Impl::reap_children() {
  signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
  }
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;  // 0: children left but none exited; -1/ECHILD: no children
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
  std::set<pid_t> keeper_pids;
  for (const auto& [pid, watch] : keepers) keeper_pids.insert(pid);
  const std::size_t found = stop.signal(groups, keeper_pids, now);
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

Supervisor::Supervisor(Events events) {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  int subreaper = 0;
  prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
  if (sigismember(&mask, SIGCHLD) != 1 || subreaper != 1) {
    throw std::logic_error(
        "dtrain::supervisor::prepare_process() must be called first in main(), before any thread is created "
        "(SIGCHLD must be blocked in every thread and the process must be a child subreaper)");
  }
  if (g_supervisor_exists.exchange(true)) {
    throw std::logic_error("only one dtrain::supervisor::Supervisor may exist per process (it reaps every child)");
  }
  try {
    impl_ = std::make_unique<Impl>(std::move(events));
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    impl_->signal_fd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (impl_->signal_fd < 0) throw_errno("signalfd(SIGCHLD)");
    impl_->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (impl_->timer_fd < 0) throw_errno("timerfd_create");
    Impl* impl = impl_.get();
    impl->loop.add(impl->signal_fd, EPOLLIN, [impl](std::uint32_t) { impl->reap_children(); });
    impl->loop.add(impl->timer_fd, EPOLLIN, [impl](std::uint32_t) {
      std::uint64_t expirations = 0;
      [[maybe_unused]] const ssize_t n = read(impl->timer_fd, &expirations, sizeof expirations);
      // Reaping first also collects zombies whose SIGCHLD never reached us (see on_worker_exited).
      impl->reap_children();
    });
    impl->thread = std::thread([impl] { impl->run(); });
  } catch (...) {
    if (impl_) {
      close_fd(impl_->signal_fd);
      close_fd(impl_->timer_fd);
    }
    g_supervisor_exists = false;
    throw;
  }
}

Supervisor::~Supervisor() {
  Impl* impl = impl_.get();
  impl->loop.post([impl] { impl->begin_shutdown(); });
  impl->thread.join();
  for (auto& [serial, worker] : impl->workers) {
    close_fd(worker->pidfd);
    close_fd(worker->keeper_fd);
    close_fd(worker->report_fd);
  }
  impl->workers.clear();
  for (auto& [pid, watch] : impl->keepers) close_fd(watch.pidfd);
  close_fd(impl->signal_fd);
  close_fd(impl->timer_fd);
  impl_.reset();
  g_supervisor_exists = false;
}

void Supervisor::spawn(std::vector<ProcessSpec> specs) {
  Impl* impl = impl_.get();
  if (std::this_thread::get_id() == impl->thread.get_id()) {
    std::size_t begun = 0;
    impl->start_all(specs, begun);
    return;
  }
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> result = finished->get_future();
  auto shared_specs = std::make_shared<std::vector<ProcessSpec>>(std::move(specs));
  const auto timeout = std::chrono::seconds(10) + kExecReportTimeout * static_cast<int>(shared_specs->size());
  impl->loop.post([impl, shared_specs, finished] {
    try {
      std::size_t begun = 0;
      impl->start_all(*shared_specs, begun);
      finished->set_value();
    } catch (...) {
      finished->set_exception(std::current_exception());
    }
  });
  if (result.wait_for(timeout) != std::future_status::ready) {
    throw std::runtime_error("dtrain supervisor: spawn got no answer from the supervisor thread within " +
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                             " s; an event callback is probably blocking that thread (events must not block)");
  }
  result.get();
}

void Supervisor::stop_all(std::chrono::milliseconds grace, std::function<void(unsigned sigkilled)> done) {
  Impl* impl = impl_.get();
  impl->loop.post([impl, grace, done = std::move(done)] { impl->begin_stop(grace, done); });
}

bool Supervisor::stop_all_and_wait(std::chrono::milliseconds grace, std::chrono::milliseconds timeout) {
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    throw std::logic_error("dtrain supervisor: stop_all_and_wait called from an event; use stop_all there");
  }
  // Shared: done may run after this call gave up waiting.
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> result = finished->get_future();
  stop_all(grace, [finished](unsigned) { finished->set_value(); });
  return result.wait_for(timeout) == std::future_status::ready;
}

void Supervisor::spawn_async(std::vector<ProcessSpec> specs) {
  Impl* impl = impl_.get();
  auto shared_specs = std::make_shared<std::vector<ProcessSpec>>(std::move(specs));
  impl->loop.post([impl, shared_specs] {
    std::size_t next = 0;
    try {
      impl->start_all(*shared_specs, next);
    } catch (const std::exception& e) {
      // Nobody waits for this call: every spec not started must still end in an exited event.
      for (; next < shared_specs->size(); ++next) {
        impl->report_spawn_failure((*shared_specs)[next], 0, std::string("not started: ") + e.what());
      }
    }
  });
}

std::size_t Supervisor::running() const { return impl_->running.load(); }

}  // namespace dtrain::supervisor

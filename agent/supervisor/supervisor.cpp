#include "agent/supervisor/supervisor.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "agent/supervisor/supervisor_impl.h"
#include "common/os/syscalls.h"

namespace dtrain::supervisor {
namespace {

// What spawn() allows the supervisor thread on top of kExecReportTimeout per spec: time to get to the request
// (it may be busy with other workers' output) and to fork, on a loaded machine.
constexpr std::chrono::seconds kSpawnAnswerSlack{10};

std::atomic<bool> g_supervisor_exists{false};

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

void Supervisor::Impl::ensure_namespace() {
  if (!options.pid_namespace || ns.active()) return;
  Result<PidNamespace> made = create_pid_namespace();
  if (made.ok()) {
    ns = made.value;
    containment = "keepers and a PID namespace";
  } else {
    // Not tried again: the reason (no privilege, mostly) does not change while this process runs.
    options.pid_namespace = false;
    containment = "keepers only: " + made.status.message();
  }
}

void Supervisor::Impl::end_namespace() {
  // SIGKILLed: reaped as a stray child by reap_children.
  if (ns.active()) close_pid_namespace(ns);
}

bool Supervisor::Impl::holder_reaped(pid_t pid) {
  if (pid != ns.holder) return false;
  // Its exit took every worker with it (their keepers report them killed); the next spawn makes a new one.
  ns.holder = 0;
  close_pid_namespace(ns);
  return true;
}

Supervisor::Supervisor(Events events, Options options) {
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
    impl_ = std::make_unique<Impl>(std::move(events), options);
    impl_->containment = "keepers only (no PID namespace was asked for)";
    // Made once now to learn whether it can be (containment() says), then for each batch of workers.
    impl_->ensure_namespace();
    if (!options.keep_first_namespace) impl_->end_namespace();
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
  if (impl->ns.active()) {
    const pid_t holder = impl->ns.holder;
    close_pid_namespace(impl->ns);
    waitpid(holder, nullptr, 0);  // SIGKILLed: at once
  }
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
  const auto timeout = kSpawnAnswerSlack + kExecReportTimeout * static_cast<int>(shared_specs->size());
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

std::string Supervisor::containment() const { return impl_->containment; }

}  // namespace dtrain::supervisor

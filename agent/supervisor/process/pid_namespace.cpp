#include "agent/supervisor/process/pid_namespace.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "agent/supervisor/process/keeper.h"
#include "agent/supervisor/output/record_pipe.h"
#include "common/os/syscalls.h"

namespace dtrain::supervisor {
namespace {

constexpr char kHolderName[] = "dtrain-pidns";
// How long create_pid_namespace waits for the holder to mount its /proc: a fork and two mounts.
constexpr std::chrono::seconds kSetupTimeout{5};
// The holder's descriptors once it has closed everything of ours: the lifeline's read end and the setup report.
constexpr int kLifelineFd = 3;
constexpr int kReportFd = 4;

// Steps of the holder's setup, reported with errno when one fails.
enum class HolderStep : int { kDescriptors = 1, kMountPrivate, kMountProc, kSignals };

struct HolderReport {
  HolderStep step;
  int error;  // 0: ready
};

// Reaps every child that has exited (orphans of the workers' trees come to init).
void reap_all() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// The holder: init of the new namespaces, in a fork of a multi-threaded process (async-signal-safe calls only).
// Every signal stays blocked (init ignores what it does not handle anyway); SIGCHLD comes through a signalfd.
[[noreturn]] void run_holder(int lifeline, int report) {
  const auto fail = [&report](HolderStep step) {
    const HolderReport r{step, errno};
    [[maybe_unused]] const ssize_t n = write(report, &r, sizeof r);
    _exit(1);
  };
  name_process(kHolderName);
  // Nothing of the agent's stays open here (its sockets, workers' pipes): only the lifeline and the report.
  if (dup2(lifeline, kLifelineFd) < 0 || dup2(report, kReportFd) < 0) fail(HolderStep::kDescriptors);
  report = kReportFd;
  syscall(SYS_close_range, 5U, ~0U, 0U);
  const int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (devnull > 2) close(devnull);
  }
  // Mounts made here stay here; the host's later mounts (a new file system, an automount) still reach the workers.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) fail(HolderStep::kMountPrivate);
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) fail(HolderStep::kMountProc);
  // The OOM killer should pick a worker, never the process whose death takes every worker with it. As root this
  // works; a failure changes nothing else.
  const int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    [[maybe_unused]] const ssize_t n = write(oom, "-1000", 5);
    close(oom);
  }
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const int signals = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signals < 0) fail(HolderStep::kSignals);
  const HolderReport ready{HolderStep::kDescriptors, 0};
  [[maybe_unused]] const ssize_t n = write(report, &ready, sizeof ready);
  close(report);
  pollfd watch[2] = {{kLifelineFd, POLLIN, 0}, {signals, POLLIN, 0}};
  for (;;) {
    if (poll(watch, 2, -1) < 0) continue;  // EINTR
    if (watch[1].revents != 0) {
      signalfd_siginfo info;
      while (read(signals, &info, sizeof info) > 0) {
      }
      reap_all();
    }
    // Nothing is ever written: readable means EOF, the agent (or its Supervisor) is gone. Our exit makes the kernel
    // SIGKILL every process left in the namespace.
    if (watch[0].revents != 0) _exit(0);
  }
}

std::string describe_step(const HolderReport& report) {
  const std::string reason = std::strerror(report.error);
  switch (report.step) {
    case HolderStep::kDescriptors: return "set up its descriptors: " + reason;
    case HolderStep::kMountPrivate: return "make its mounts its own (mount --make-rslave /): " + reason;
    case HolderStep::kMountProc: return "mount its /proc: " + reason;
    case HolderStep::kSignals: return "watch its children (signalfd): " + reason;
  }
  return reason;
}

// The holder's report, or why there is none within kSetupTimeout.
Status await_holder(int report_fd) {
  const auto deadline = std::chrono::steady_clock::now() + kSetupTimeout;
  HolderReport report{};
  const RecordRead read = read_record(report_fd, &report, sizeof report, deadline);
  if (read.outcome == RecordRead::Outcome::kTimeout) {
    return {StatusCode::internal, "the PID namespace's holder did not report within " +
                                      std::to_string(kSetupTimeout.count()) + " s"};
  }
  if (read.outcome == RecordRead::Outcome::kEnded) {
    return {StatusCode::internal, "the PID namespace's holder ended before it was ready"};
  }
  if (report.error == 0) return {};
  return {StatusCode::internal, "the PID namespace's holder could not " + describe_step(report)};
}

}  // namespace

Result<PidNamespace> create_pid_namespace() {
  int lifeline[2] = {-1, -1}, report[2] = {-1, -1};
  if (pipe2(lifeline, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
    const Status failed{StatusCode::internal, std::string("cannot create a PID namespace: pipe: ") +
                                                  std::strerror(errno)};
    close_fds({lifeline[0], lifeline[1], report[0], report[1]});
    return {failed};
  }
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  // A raw clone is a fork into new namespaces: the child is pid 1 of the new PID namespace. It runs only
  // async-signal-safe code (no glibc state that caches the thread id is used).
  const long holder = syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, nullptr, nullptr, nullptr, 0);
  if (holder == 0) {
    close(lifeline[1]);
    close(report[0]);
    run_holder(lifeline[0], report[1]);
  }
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  close_fds({lifeline[0], report[1]});
  if (holder < 0) {
    close_fds({lifeline[1], report[0]});
    if (clone_errno == EPERM) {
      return {{StatusCode::permission_denied,
               "no PID namespace for the workers: creating one needs CAP_SYS_ADMIN (run the agent as root); "
               "without it a worker's setsid'd or double-forked descendants survive when every dtrain process "
               "of the node is SIGKILLed at once (the keepers still end them when the agent dies alone)"}};
    }
    return {{StatusCode::internal,
             std::string("cannot create a PID namespace for the workers: clone: ") + std::strerror(clone_errno)}};
  }
  PidNamespace ns;
  ns.holder = static_cast<pid_t>(holder);
  ns.lifeline = lifeline[1];
  const Status ready = await_holder(report[0]);
  close(report[0]);
  if (ready.ok()) {
    const std::string dir = "/proc/" + std::to_string(ns.holder) + "/ns/";
    ns.pid_ns = open((dir + "pid").c_str(), O_RDONLY | O_CLOEXEC);
    ns.mnt_ns = open((dir + "mnt").c_str(), O_RDONLY | O_CLOEXEC);
    if (ns.pid_ns >= 0 && ns.mnt_ns >= 0) return {{}, ns};
  }
  const Status failed = ready.ok() ? Status{StatusCode::internal, "cannot open the PID namespace's /proc/" +
                                                                      std::to_string(ns.holder) + "/ns: " +
                                                                      std::strerror(errno)}
                                   : ready;
  close_pid_namespace(ns);
  return {failed};
}

void close_pid_namespace(PidNamespace& ns) {
  if (ns.holder > 0) kill(ns.holder, SIGKILL);
  close_fds({ns.lifeline, ns.pid_ns, ns.mnt_ns});
  ns = PidNamespace{};
}

}  // namespace dtrain::supervisor

#include "agent/supervisor/process/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <csignal>
#include <cstring>
#include <map>

#include "agent/supervisor/process/keeper.h"
#include "agent/supervisor/output/record_pipe.h"
#include "common/os/syscalls.h"

extern char** environ;

namespace dtrain::supervisor {
namespace {

#ifndef CLOSE_RANGE_CLOEXEC
constexpr unsigned CLOSE_RANGE_CLOEXEC = 1U << 2;
#endif

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// Every worker gets DTRAIN_WORKER_PID, its own pid as it sees it (getpid(), in the supervisor's PID namespace when
// there is one): the Python health helper and the bootstrap report only from the process whose pid it is, never from
// the children that inherit the variable (DataLoader workers, subprocesses). The entry is reserved in the parent,
// filled in by the child between fork and exec (no allocation there), and replaces any value the spec gave.
constexpr std::string_view kWorkerPidKey = "DTRAIN_WORKER_PID=";
constexpr std::size_t kPidDigits = 20;  // room for any pid_t
struct WorkerPidEntry {
  char text[kWorkerPidKey.size() + kPidDigits + 1] = {};
  WorkerPidEntry() { std::memcpy(text, kWorkerPidKey.data(), kWorkerPidKey.size()); }
  char* digits() { return text + kWorkerPidKey.size(); }
};

// Writes `pid` in decimal at `out`, NUL-terminated. Async-signal-safe.
void write_pid(char* out, pid_t pid) {
  char reversed[kPidDigits];
  std::size_t n = 0;
  auto value = static_cast<std::uint64_t>(pid);
  do {
    reversed[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0 && n < kPidDigits);
  for (std::size_t i = 0; i < n; ++i) out[i] = reversed[n - 1 - i];
  out[n] = '\0';
}

// Which step of the child setup failed; sent with errno through the report pipe.
enum class ChildStage : int { kStdio = 1, kParentDeathSignal, kAffinity, kWorkingDir, kExec, kNamespace };
struct ChildFailure {
  ChildStage stage;
  int error;
};

std::string join_cpus(const std::vector<unsigned>& cpus) {
  std::string out;
  for (const unsigned cpu : cpus) {
    if (!out.empty()) out += ',';
    out += std::to_string(cpu);
  }
  return out;
}

std::string describe_failure(const ChildFailure& failure, const LaunchPlan& plan) {
  const std::string reason = std::strerror(failure.error);
  switch (failure.stage) {
    case ChildStage::kStdio:
      return "cannot set up stdin/stdout/stderr for '" + plan.program + "': " + reason;
    case ChildStage::kParentDeathSignal:
      return "cannot set the parent-death signal for '" + plan.program + "': " + reason;
    case ChildStage::kAffinity:
      return "cannot bind '" + plan.program + "' to cpus " + join_cpus(plan.cpus) + ": " + reason +
             " (check the cpus exist and are allowed for this agent: taskset -cp " + std::to_string(getpid()) + ")";
    case ChildStage::kWorkingDir:
      return "cannot change to working directory '" + plan.working_dir + "' for '" + plan.program + "': " + reason;
    case ChildStage::kExec:
      return "cannot execute '" + plan.program + "': " + reason;
    case ChildStage::kNamespace:
      return "cannot enter the workers' mount namespace (their /proc) for '" + plan.program + "': " + reason;
  }
  return "cannot start '" + plan.program + "': " + reason;
}

bool is_executable_file(const std::string& path, int& error) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (access(path.c_str(), X_OK) != 0) {
    error = EACCES;
    return false;
  }
  return true;
}

// Moves a descriptor off 0..2 so that installing the child's stdio cannot overwrite it (an agent started with its
// stdio closed gets pipes numbered 0..2). Async-signal-safe.
int above_stdio(int fd) { return fd > 2 ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 3); }

// The child between fork and exec: async-signal-safe calls only, no allocation, no locks. `parent` is the keeper's
// pid as the child sees it: 0 inside the supervisor's PID namespace (its parent is outside it).
[[noreturn]] void run_child(const LaunchPlan& plan, char* const* argv, char* const* envp, char* pid_digits,
                            pid_t parent, int null_fd, int out_fd, int err_fd, int report_fd) {
  // By reference: report_fd is moved off 0..2 below, and the old number may then become the worker's stdout.
  const auto fail = [&report_fd](ChildStage stage) {
    const ChildFailure failure{stage, errno};
    [[maybe_unused]] const ssize_t n = write(report_fd, &failure, sizeof failure);
    _exit(127);
  };
  setpgid(0, 0);
  if (plan.parent_death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, plan.parent_death_signal) != 0) fail(ChildStage::kParentDeathSignal);
    // The parent may have died before prctl: then nobody would ever send the signal.
    if (getppid() != parent) _exit(127);
  }
  if (plan.cpu_mask && sched_setaffinity(0, plan.cpu_mask_size, plan.cpu_mask.get()) != 0) fail(ChildStage::kAffinity);
  // Moves to the namespace's root directory too; working_dir (never empty then) brings it back.
  if (plan.mnt_ns >= 0 && setns(plan.mnt_ns, CLONE_NEWNS) != 0) fail(ChildStage::kNamespace);
  report_fd = above_stdio(report_fd);
  null_fd = above_stdio(null_fd);
  out_fd = above_stdio(out_fd);
  err_fd = above_stdio(err_fd);
  if (report_fd < 0 || null_fd < 0 || out_fd < 0 || err_fd < 0) fail(ChildStage::kStdio);
  if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) fail(ChildStage::kStdio);
  // Descriptors other threads of the agent opened without O_CLOEXEC must not leak into workers.
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  if (!plan.working_dir.empty() && chdir(plan.working_dir.c_str()) != 0) fail(ChildStage::kWorkingDir);
  // Ignored signals survive exec; workers start from the defaults. All signals are still blocked here (the parent
  // blocked them around fork), so no handler of the agent can run in the child.
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  write_pid(pid_digits, getpid());
  execve(plan.program.c_str(), argv, envp);
  fail(ChildStage::kExec);
  _exit(127);  // not reached: fail() exits
}

// The keeper between fork and its own life in keep(): forks the worker, reports it, drops everything of the agent.
[[noreturn]] void run_keeper(const LaunchPlan& plan, char* const* argv, char* const* envp, char* pid_digits,
                             pid_t agent, int null_fd, int out_fd, int err_fd, int report_fd, int status_fd) {
  const auto failed = [status_fd](KeeperRecord::Step step, int error) {
    const KeeperRecord record{KeeperRecord::kSetupFailed, 0, step, error};
    [[maybe_unused]] const ssize_t n = write(status_fd, &record, sizeof record);
    _exit(127);
  };
  if (const int error = become_keeper(agent); error != 0) failed(KeeperRecord::kStepSetup, error);
  // Our next child is born in the supervisor's PID namespace; vfork still returns its pid in ours (the host's), the
  // pid every record and the agent use.
  if (plan.pid_ns >= 0 && setns(plan.pid_ns, CLONE_NEWPID) != 0) failed(KeeperRecord::kStepSetup, errno);
  const pid_t keeper = plan.pid_ns >= 0 ? 0 : getpid();
  // vfork: the child borrows this memory until it execs (run_child only writes its own frame and exits or execs),
  // so the agent's page tables are not copied a second time, and no atfork handler of the agent's libraries runs
  // in this fork of a multi-threaded process.
  const pid_t worker = vfork();
  if (worker == 0) run_child(plan, argv, envp, pid_digits, keeper, null_fd, out_fd, err_fd, report_fd);
  if (worker < 0) failed(KeeperRecord::kStepFork, errno);
  // The child does the same; doing it here too means the group exists before the agent signals it.
  setpgid(worker, worker);
  const KeeperRecord forked{KeeperRecord::kWorkerForked, worker, 0, 0};
  [[maybe_unused]] const ssize_t n = write(status_fd, &forked, sizeof forked);
  // Nothing of the agent's stays open here (its sockets, other workers' pipes, this worker's pipe ends, whose EOF
  // the agent waits for): stdio becomes /dev/null and the record pipe becomes descriptor 3.
  int records = above_stdio(status_fd);
  const int null_above = above_stdio(null_fd);
  if (records >= 0 && null_above >= 0) {
    dup2(null_above, 0);
    dup2(null_above, 1);
    dup2(null_above, 2);
    if (records != 3) records = dup2(records, 3);
  }
  syscall(SYS_close_range, 4U, ~0U, 0U);
  keep(worker, KeeperPlan{agent, plan.parent_death_signal, plan.orphan_grace, records});
}

// The keeper's first record, or why there is none within kKeeperReportTimeout.
Result<pid_t> await_worker_pid(int keeper_fd, const LaunchPlan& plan) {
  const auto deadline = std::chrono::steady_clock::now() + kKeeperReportTimeout;
  const std::string failed = "cannot start '" + plan.program + "': ";
  KeeperRecord record{};
  const RecordRead read = read_record(keeper_fd, &record, sizeof record, deadline);
  if (read.outcome == RecordRead::Outcome::kTimeout) {
    return {{StatusCode::deadline_exceeded,
             failed + "its keeper process did not report within " + std::to_string(kKeeperReportTimeout.count()) +
                 " s (is the machine out of memory or processes?)"}};
  }
  if (read.outcome == RecordRead::Outcome::kEnded) {
    return {{StatusCode::internal, failed + "its keeper process ended before it started it"}};
  }
  if (record.kind == KeeperRecord::kWorkerForked && record.pid > 0) return {{}, static_cast<pid_t>(record.pid)};
  if (record.kind == KeeperRecord::kSetupFailed) {
    const std::string reason = std::strerror(record.value);
    if (record.code == KeeperRecord::kStepFork) return {{StatusCode::internal, failed + "fork: " + reason}};
    return {{StatusCode::internal, failed + "cannot set up its keeper process: " + reason}};
  }
  return {{StatusCode::internal, failed + "unexpected record from its keeper process"}};
}

}  // namespace

Result<std::string> search_path(const std::string& name, const std::string& path_var, const std::string& working_dir) {
  int error = ENOENT;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = path_var.find(':', start);
    std::string dir = path_var.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    // exec resolves a relative path after chdir, so check it from there too.
    const std::string checked =
        (candidate[0] != '/' && !working_dir.empty()) ? working_dir + "/" + candidate : candidate;
    int candidate_error = 0;
    if (is_executable_file(checked, candidate_error)) return {{}, candidate};
    if (candidate_error == EACCES) error = EACCES;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return {{error == EACCES ? StatusCode::permission_denied : StatusCode::not_found,
           "cannot execute '" + name + "': " + std::strerror(error) + " (PATH=" + path_var + ")"}};
}

Result<LaunchPlan> plan_launch(const ProcessSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return {{StatusCode::invalid_argument, "cannot execute: empty command (argv)"}};
  }
  LaunchPlan plan;
  plan.argv = spec.argv;
  plan.working_dir = spec.working_dir;
  plan.parent_death_signal = spec.parent_death_signal;
  plan.orphan_grace = spec.orphan_grace;
  plan.cpus = spec.cpus;

  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*entry, static_cast<std::size_t>(eq - *entry)), std::string(eq + 1));
  }
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return {{StatusCode::invalid_argument, "invalid environment variable name '" + key + "' for '" + spec.argv[0] +
                                                 "': it must be non-empty and must not contain '='"}};
    }
    env[key] = value;
  }
  for (const auto& [key, value] : env) plan.env.push_back(key + "=" + value);

  const std::string& name = spec.argv[0];
  if (name.find('/') != std::string::npos) {
    plan.program = name;
  } else {
    const auto path_it = env.find("PATH");
    Result<std::string> found = search_path(name, path_it != env.end() ? path_it->second : kDefaultPath,
                                            spec.working_dir);
    if (!found.ok()) return {found.status};
    plan.program = std::move(found.value);
  }

  if (!spec.cpus.empty()) {
    unsigned max_cpu = 0;
    for (const unsigned cpu : spec.cpus) max_cpu = std::max(max_cpu, cpu);
    if (max_cpu >= 1U << 20) {
      return {{StatusCode::invalid_argument,
               "cannot bind '" + name + "' to cpu " + std::to_string(max_cpu) + ": no such cpu"}};
    }
    const int count = static_cast<int>(max_cpu) + 1;
    plan.cpu_mask = {CPU_ALLOC(count), [](cpu_set_t* set) { CPU_FREE(set); }};
    plan.cpu_mask_size = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(plan.cpu_mask_size, plan.cpu_mask.get());
    for (const unsigned cpu : spec.cpus) CPU_SET_S(cpu, plan.cpu_mask_size, plan.cpu_mask.get());
  }

  return {{}, std::move(plan)};
}

Result<ForkedKeeper> fork_keeper(const LaunchPlan& plan) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1}, status[2] = {-1, -1};
  const auto fail = [&](const char* what) -> Result<ForkedKeeper> {
    Status failed{StatusCode::internal,
                  std::string("cannot start '") + plan.program + "': " + what + ": " + std::strerror(errno)};
    close_fds({out[0], out[1], err[0], err[1], report[0], report[1], status[0], status[1]});
    return {std::move(failed)};
  };
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0 ||
      pipe2(status, O_CLOEXEC) != 0) {
    return fail("pipe");
  }
  if (fcntl(out[0], F_SETFL, O_NONBLOCK) != 0 || fcntl(err[0], F_SETFL, O_NONBLOCK) != 0) return fail("fcntl");
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) return fail("open /dev/null");

  // execve wants mutable pointers; build them before fork (no allocation in the child).
  std::vector<char*> argv, envp;
  for (const auto& arg : plan.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& entry : plan.env) {
    if (entry.compare(0, kWorkerPidKey.size(), kWorkerPidKey) != 0) envp.push_back(const_cast<char*>(entry.c_str()));
  }
  WorkerPidEntry worker_pid;
  envp.push_back(worker_pid.text);
  envp.push_back(nullptr);

  const pid_t agent = getpid();
  // Every signal stays blocked in the keeper (only SIGKILL ends it); the worker unblocks them before exec.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  // _Fork, not fork: the keeper runs only async-signal-safe code, so the atfork handlers of the agent's libraries
  // (gRPC, malloc's arena locks across all its threads) are pure cost here, paid once per worker.
  const pid_t keeper = _Fork();
  if (keeper == 0) {
    run_keeper(plan, argv.data(), envp.data(), worker_pid.digits(), agent, null_fd, out[1], err[1], report[1],
               status[1]);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  close_fds({null_fd, out[1], err[1], report[1], status[1]});
  out[1] = err[1] = report[1] = status[1] = -1;
  if (keeper < 0) {
    errno = fork_errno;
    return fail("fork");
  }
  return {{}, ForkedKeeper{keeper, out[0], err[0], report[0], status[0]}};
}

Result<LaunchedChild> await_keeper(const ForkedKeeper& forked, const LaunchPlan& plan) {
  Result<pid_t> worker = await_worker_pid(forked.keeper_fd, plan);
  Status failed = worker.status;
  if (failed.ok() && fcntl(forked.keeper_fd, F_SETFL, O_NONBLOCK) != 0) {
    failed = {StatusCode::internal, "cannot start '" + plan.program + "': fcntl: " + std::strerror(errno)};
  }
  if (!failed.ok()) {
    // Our own unreaped child, so the pid is still the keeper's; the supervisor reaps it like any stray child.
    kill(forked.keeper, SIGKILL);
    close_fds({forked.stdout_fd, forked.stderr_fd, forked.report_fd, forked.keeper_fd});
    return {std::move(failed)};
  }
  return {{}, LaunchedChild{worker.value, forked.keeper, forked.stdout_fd, forked.stderr_fd, forked.report_fd,
                            forked.keeper_fd}};
}

ExecReport await_exec(int report_fd, const LaunchPlan& plan, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ChildFailure failure{};
  const RecordRead read = read_record(report_fd, &failure, sizeof failure, deadline);
  switch (read.outcome) {
    case RecordRead::Outcome::kComplete: return {ExecReport::Outcome::kFailed, describe_failure(failure, plan)};
    case RecordRead::Outcome::kTimeout: return {ExecReport::Outcome::kUndecided, ""};
    case RecordRead::Outcome::kEnded: break;
  }
  // EOF: the write end was closed by a successful exec (or the child died before reporting anything).
  if (read.got == 0) return {ExecReport::Outcome::kExecuted, ""};
  return {ExecReport::Outcome::kFailed, "cannot start '" + plan.program + "': truncated failure report"};
}

}  // namespace dtrain::supervisor

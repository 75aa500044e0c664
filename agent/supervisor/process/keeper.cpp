#include "agent/supervisor/process/keeper.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

// Everything here runs in a fork of a multi-threaded process: async-signal-safe calls only, no allocation, no
// locks, no exceptions, no stdio.
namespace dtrain::supervisor {
namespace {

constexpr char kKeeperName[] = "dtrain-keeper";

std::int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

// Reads up to size-1 bytes of a /proc file into buf, NUL-terminated. Returns the length, or -1.
ssize_t read_small_file(const char* path, char* buf, std::size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::size_t got = 0;
  while (got + 1 < size) {
    const ssize_t n = read(fd, buf + got, size - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  buf[got] = '\0';
  return static_cast<ssize_t>(got);
}

// "/proc/<pid>/stat" into out (at least 32 bytes).
void stat_path(pid_t pid, char* out) {
  char digits[16];
  int n = 0;
  for (auto v = static_cast<unsigned>(pid); n == 0 || v != 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  std::memcpy(out, "/proc/", 6);
  int at = 6;
  while (n > 0) out[at++] = digits[--n];
  std::memcpy(out + at, "/stat", 6);
}

// The fields of /proc/<pid>/stat after "pid (comm)": comm may hold spaces and ')', so they start after the last ')'.
// Returns a pointer to the first field (the state), or nullptr.
const char* stat_fields(char* stat, ssize_t length) {
  for (ssize_t i = length - 1; i >= 0; --i) {
    if (stat[i] == ')') return stat + i + 1;
  }
  return nullptr;
}

// Parses the index-th space-separated decimal field (0 = the state letter) of stat_fields' result; -1 if absent.
long long stat_field(const char* fields, int index) {
  const char* p = fields;
  for (int i = 0;; ++i) {
    while (*p == ' ') ++p;
    if (*p == '\0' || *p == '\n') return -1;
    if (i == index) break;
    while (*p != ' ' && *p != '\0') ++p;
  }
  long long value = 0;
  if (*p < '0' || *p > '9') return -1;
  while (*p >= '0' && *p <= '9') value = value * 10 + (*p++ - '0');
  return value;
}

pid_t parent_of(pid_t pid) {
  char path[32];
  stat_path(pid, path);
  // "pid (comm) S ppid ...": comm is at most 15 bytes, so the first 256 bytes hold the parent.
  char stat[256];
  const ssize_t length = read_small_file(path, stat, sizeof stat);
  const char* fields = length > 0 ? stat_fields(stat, length) : nullptr;
  return fields != nullptr ? static_cast<pid_t>(stat_field(fields, 1)) : -1;
}

pid_t parse_pid(const char* name) {
  long value = 0;
  if (*name == '\0') return 0;
  for (; *name != '\0'; ++name) {
    if (*name < '0' || *name > '9' || value > 1'000'000'000) return 0;
    value = value * 10 + (*name - '0');
  }
  return static_cast<pid_t>(value);
}

// ps and pgrep read /proc/<pid>/cmdline from the argv area of the process's memory; ours is the agent's copy
// ("dtrain agent --listen ..."). Overwriting it (our private copy-on-write page) makes the keeper read as what it is.
void rename_cmdline(const char* name, std::size_t size) {
  char stat[2048];
  const ssize_t length = read_small_file("/proc/self/stat", stat, sizeof stat);
  const char* fields = length > 0 ? stat_fields(stat, length) : nullptr;
  if (fields == nullptr) return;
  // Fields 48 and 49 of proc(5), counted from the state (field 3).
  const long long start = stat_field(fields, 48 - 3);
  const long long end = stat_field(fields, 49 - 3);
  if (start <= 0 || end - start < static_cast<long long>(size)) return;
  char* area = reinterpret_cast<char*>(static_cast<std::uintptr_t>(start));
  std::memcpy(area, name, size);
  std::memset(area + size, 0, static_cast<std::size_t>(end - start) - size);
}

void write_record(int fd, const KeeperRecord& record) {
  // A closed read end (the agent is gone, or gave up on this spawn) is EPIPE: SIGPIPE is blocked here.
  while (write(fd, &record, sizeof record) < 0 && errno == EINTR) {
  }
}

// Reaps every child that has exited; the worker's exit is written to the agent before the worker is reaped, so
// a keeper killed in between has not lost it (the zombie goes to the agent). Returns false when no child is left.
bool reap(pid_t worker, bool& worker_reported, int status_fd) {
  for (;;) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      return false;  // ECHILD
    }
    if (info.si_pid == 0) return true;  // children left, none exited
    if (info.si_pid == worker && !worker_reported) {
      write_record(status_fd, KeeperRecord{KeeperRecord::kWorkerExited, worker, info.si_code, info.si_status});
      worker_reported = true;
    }
    siginfo_t reaped{};
    waitid(P_PID, static_cast<id_t>(info.si_pid), &reaped, WEXITED | WNOHANG);
  }
}

}  // namespace

void name_process(const char* name) {
  prctl(PR_SET_NAME, name);  // cosmetic: a failure changes nothing else
  rename_cmdline(name, std::strlen(name) + 1);
}

int become_keeper(pid_t agent) {
  if (setpgid(0, 0) != 0) return errno;
  name_process(kKeeperName);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return errno;
  if (prctl(PR_SET_PDEATHSIG, kKeeperOrphanSignal) != 0) return errno;
  // The agent may have died before prctl: then nobody would ever send the signal.
  if (getppid() != agent) return ESRCH;
  return 0;
}

std::size_t signal_children(int sig) {
  // getdents64 records are 8-byte aligned within the buffer.
  alignas(8) static char buffer[32768];
  const pid_t self = getpid();
  const int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  std::size_t signalled = 0;
  for (;;) {
    const ssize_t n = getdents64(dir, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t offset = 0; offset < n;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + offset);
      offset += entry->d_reclen;
      const pid_t pid = parse_pid(entry->d_name);
      if (pid > 0 && pid != self && parent_of(pid) == self && kill(pid, sig) == 0) ++signalled;
    }
  }
  close(dir);
  return signalled;
}

void keep(pid_t worker, const KeeperPlan& plan) {
  sigset_t wake;
  sigemptyset(&wake);
  sigaddset(&wake, SIGCHLD);
  sigaddset(&wake, kKeeperOrphanSignal);
  bool reported = false;  // the worker's exit was written (it is reaped right after)
  bool orphaned = false;  // the agent or its supervisor thread is gone
  bool killing = false;   // SIGKILL to every child, repeated until none is left
  std::int64_t grace_end = 0;

  const auto orphan = [&] {
    orphaned = true;
    const int sig = plan.parent_death_signal;
    // Not yet reported means not yet reaped: the pid is still the worker's.
    if (!reported && sig != 0) {
      kill(worker, sig);
      // A stopped worker would hold the signal pending until orphan_grace ends in SIGKILL.
      if (sig != SIGKILL) kill(worker, SIGCONT);
    }
    if (sig == 0 || sig == SIGKILL) {
      killing = true;
    } else {
      grace_end = now_ms() + plan.orphan_grace.count();
    }
  };

  for (;;) {
    // The worker is a child until it is reaped, and it is reaped only after it was reported.
    if (!reap(worker, reported, plan.status_fd)) _exit(0);
    if (!orphaned && getppid() != plan.agent) orphan();
    if (orphaned && !killing && (reported || now_ms() >= grace_end)) killing = true;
    if (killing) signal_children(SIGKILL);

    siginfo_t info{};
    int sig = 0;
    if (killing || orphaned) {
      const std::int64_t wait_ms = killing ? kKeeperKillRescan.count() : grace_end - now_ms();
      const std::int64_t bounded = wait_ms > 0 ? wait_ms : 0;
      const timespec timeout{static_cast<time_t>(bounded / 1000), static_cast<long>(bounded % 1000) * 1'000'000};
      sig = sigtimedwait(&wake, &info, &timeout);
    } else {
      sig = sigwaitinfo(&wake, &info);
    }
    // The parent-death signal also fires when only the supervisor thread ended (the Supervisor was destroyed while
    // the process lives on): the agent is then the sender. From anyone else it is ignored.
    if (sig == kKeeperOrphanSignal && info.si_pid == plan.agent && !orphaned) orphan();
  }
}

}  // namespace dtrain::supervisor

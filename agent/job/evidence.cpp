#include "agent/job/evidence.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "agent/job/run_dir.h"
#include "common/os/proc_stat.h"
#include "common/status.h"

extern char** environ;

namespace dtrain::agent {
namespace {

using Clock = std::chrono::steady_clock;

// What the stacks file may hold when it is read back for the frames: gdb's output for a few hundred threads.
constexpr std::size_t kMaxStacksRead = 4 << 20;
// How often a Python stacks file is looked at while its worker writes it: a few looks within kPythonDumpWait.
constexpr std::chrono::milliseconds kDumpPoll{20};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

off_t file_size(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? info.st_size : 0;
}

// Sends the worker its dump signal and waits until its stacks file grew and stopped growing (at most
// kPythonDumpWait, never past `deadline`); returns what the dump added to the file.
Result<std::string> python_dump(const StackTarget& target, Clock::time_point deadline) {
  const std::string which = "rank " + std::to_string(target.rank) + "'s own stack dump (signal " +
                            std::to_string(target.dump_signal) + " to pid " + std::to_string(target.pid) + ")";
  const off_t start = file_size(target.dump_file);
  if (::kill(target.pid, target.dump_signal) != 0) {
    return {{StatusCode::unavailable, "cannot ask for " + which + ": " + std::strerror(errno)}};
  }
  const auto until = std::min(deadline, Clock::now() + kPythonDumpWait);
  off_t seen = start;
  while (Clock::now() < until) {
    std::this_thread::sleep_for(kDumpPoll);
    const off_t size = file_size(target.dump_file);
    if (size > start && size == seen) break;
    seen = size;
  }
  if (seen <= start) {
    return {{StatusCode::deadline_exceeded, which + " were not written to " + target.dump_file + " within " +
                                                std::to_string(kPythonDumpWait.count()) + " ms"}};
  }
  const Result<std::string> text = read_placed_file(target.dump_file, kMaxStacksRead);
  if (!text.ok()) return {{StatusCode::failed_precondition, "cannot read " + which + ": " + text.status.message()}};
  const std::string& dump = text.value;
  return {{}, dump.size() > static_cast<std::size_t>(start) ? dump.substr(static_cast<std::size_t>(start)) : ""};
}

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "thread 4242 (dtrain-trainer): state S, wchan futex_wait_queue", one line per thread of `pid`.
std::vector<std::string> thread_states(pid_t pid) {
  namespace fs = std::filesystem;
  std::vector<std::string> lines;
  std::error_code ec;
  const fs::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : fs::directory_iterator(tasks, ec)) {
    const std::string task = entry.path().string();
    const Result<ProcStat> stat = read_proc_stat_file(task + "/stat");
    const std::string state(1, stat.ok() ? stat.value.state : '?');
    std::string wchan = first_line_of(task + "/wchan");
    if (wchan.empty() || wchan == "0") wchan = "-";
    lines.push_back("thread " + entry.path().filename().string() + " (" + first_line_of(task + "/comm") +
                    "): state " + state + ", wchan " + wchan);
  }
  if (lines.empty()) lines.push_back("no threads under " + tasks.string() + (ec ? ": " + ec.message() : ""));
  return lines;
}

// How long gdb gets, after SIGHUP, to detach from the worker and exit before it is SIGKILLed: a detach is a few
// ptrace calls, but on a loaded machine gdb may be in the middle of reading a large library's symbols.
constexpr std::chrono::milliseconds kGdbDetachWait{500};

// Until the process behind `pidfd` exited or `until` passed; true when it exited.
bool wait_exit(int pidfd, Clock::time_point until) {
  pollfd watch{pidfd, POLLIN, 0};
  int ready = 0;
  do {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    ready = ::poll(&watch, 1, static_cast<int>(std::max<long long>(left, 0)));
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

// Ends a gdb that ran out of time without leaving its tracee stopped or signalled. SIGHUP first: gdb detaches from
// the worker and exits when its event loop next runs (at once while it waits on the worker). Not SIGINT, nor SIGTERM
// (which also raises gdb's quit flag): while gdb counts the worker as running (from the attach until every thread
// has stopped, which includes reading every library's symbols, seconds for libtorch) it passes a quit on to the
// worker as a SIGINT, which then sits in a signal stop until gdb is killed and is delivered then: a Python worker
// raised KeyboardInterrupt, whose traceback then led the failure summary. A gdb that does not quit in time (it is
// reading symbols) is SIGKILLed, and the kernel then leaves the worker group-stopped (a ptrace attach stops it):
// SIGCONT lets it run its handlers again, above all the SIGTERM of the stop that follows. Returns what happened,
// for the stacks file's note.
std::string end_gdb(int pidfd, pid_t worker, Clock::time_point deadline) {
  syscall(SYS_pidfd_send_signal, pidfd, SIGHUP, nullptr, 0);
  std::string how = "told to detach (SIGHUP)";
  if (!wait_exit(pidfd, std::max(deadline, Clock::now() + std::chrono::milliseconds(50)))) {
    syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    wait_exit(pidfd, Clock::now() + kGdbDetachWait);
    how = "killed";
  }
  ::kill(worker, SIGCONT);
  return how;
}

// Runs gdb on `pid` with its output appended to `fd`, ended at `deadline` (end_gdb). Ok when it ran to its end by
// itself; unavailable when it is not installed or cannot run, deadline_exceeded when it had to be ended.
Status run_gdb(pid_t pid, int fd, Clock::time_point deadline) {
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, fd, 1);
  posix_spawn_file_actions_adddup2(&files, fd, 2);
  // The agent's threads block SIGCHLD (the supervisor takes it through a signalfd); gdb needs it to see its
  // inferior stop.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGCHLD);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGHUP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string target = std::to_string(pid);
  // No init files, no debuginfod lookups over the network: only what is on this node, quickly.
  const char* argv[] = {"gdb", "-nx", "-batch", "-iex", "set debuginfod enabled off", "-p", target.c_str(),
                        "-ex", "thread apply all bt", nullptr};
  pid_t gdb = 0;
  const int spawned = posix_spawnp(&gdb, "gdb", &files, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (spawned == ENOENT) {
    return {StatusCode::unavailable, "gdb is not installed (thread states from /proc only; install gdb for stacks)"};
  }
  if (spawned != 0) return {StatusCode::unavailable, std::string("cannot run gdb: ") + std::strerror(spawned)};
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, gdb, 0));
  if (pidfd < 0) return {};   // already gone (and reaped by the supervisor)
  Status status;
  // The detach comes out of the budget, so the answer still comes within it.
  if (!wait_exit(pidfd, deadline - kGdbDetachWait)) {
    const std::string how = end_gdb(pidfd, pid, deadline);
    status = {StatusCode::deadline_exceeded, "gdb did not finish in time and was " + how + "; its stacks may be partial"};
  }
  ::close(pidfd);
  return status;
}

// What a reader of the stacks file should make of gdb's warning "Target and debugger are in different PID namespaces":
// a root agent's workers live in a PID namespace of their own (supervisor/process/pid_namespace.h), gdb in the
// agent's. Measured on a PyTorch worker, gdb from here and gdb inside the worker's namespaces (nsenter) took the same
// time and listed the same threads; the ids it shows are the host's, as the thread states above. "" when the worker
// shares this process's PID namespace.
std::string namespace_note(pid_t pid) {
  std::error_code ours_ec, theirs_ec;
  const auto ours = std::filesystem::read_symlink("/proc/self/ns/pid", ours_ec);
  const auto theirs = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/pid", theirs_ec);
  if (ours_ec || theirs_ec || ours == theirs) return "";
  return "(the worker is in the job's PID namespace, gdb in the agent's: its warning about that below is expected; "
         "thread ids are the host's, as above)\n";
}

// Appends `note` to what `error` already says: a dump that failed and a gdb that was cut short are both worth
// knowing.
void add_note(std::string& error, const std::string& note) { error += (error.empty() ? "" : "; ") + note; }

RankStacks stacks_of(const StackTarget& target, Clock::time_point deadline) {
  RankStacks out{target.rank, target.path, {}, target.error, std::nullopt};
  if (target.path.empty()) return out;
  const std::vector<std::string> threads = thread_states(target.pid);
  const int fd = ::open(target.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    out.error = "cannot write " + target.path + ": " + std::strerror(errno);
    out.path.clear();
    return out;
  }
  std::string head = "rank " + std::to_string(target.rank) + ", pid " + std::to_string(target.pid) +
                     ": threads (/proc/PID/task/TID state and wchan)\n";
  for (const auto& line : threads) head += "  " + line + "\n";
  std::vector<std::string> dump_frames;
  if (!target.dump_file.empty()) {
    const Result<std::string> dump = python_dump(target, deadline);
    head += "\nthe worker's own dump (signal " + std::to_string(target.dump_signal) + ", appended to " +
            target.dump_file + "):\n" + (dump.ok() ? dump.value : dump.status.message() + "\n");
    if (!dump.ok()) add_note(out.error, dump.status.message());
    dump_frames = python_top_frames(dump.value);
    if (dump_frames.empty()) dump_frames = trainer_top_frames(dump.value);
    out.collectives = collective_state(dump.value);
  }
  head += "\ngdb -batch -p " + std::to_string(target.pid) + " -ex 'thread apply all bt':\n";
  head += namespace_note(target.pid);
  const bool written = ::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size());
  const int write_errno = errno;
  const Status gdb = run_gdb(target.pid, fd, deadline);
  ::close(fd);
  if (!written) add_note(out.error, "cannot write " + target.path + ": " + std::strerror(write_errno));
  if (!gdb.ok()) add_note(out.error, gdb.message());
  out.top_frames = dump_frames;
  if (out.top_frames.empty()) {
    const Result<std::string> written_stacks = read_placed_file(target.path, kMaxStacksRead);
    if (!written_stacks.ok()) add_note(out.error, written_stacks.status.message());
    out.top_frames = top_frames(written_stacks.value);
  }
  if (out.top_frames.empty()) {
    add_note(out.error, gdb.ok() ? "gdb printed no frames of the main thread (it could not attach: see the file); "
                                   "main thread not captured, each thread's state shown instead"
                                 : "main thread not captured, each thread's state shown instead");
    for (std::size_t i = 0; i < threads.size() && i < kTopFrames; ++i) {
      out.top_frames.push_back(threads[i].substr(0, kMaxFrameBytes));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> top_frames(const std::string& text) {
  const std::vector<std::string> lines = lines_of(text);
  std::size_t from = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("Thread 1 ", 0) == 0) from = i + 1;
  }
  std::vector<std::string> frames;
  for (std::size_t i = from; i < lines.size() && frames.size() < kTopFrames; ++i) {
    if (lines[i].rfind('#', 0) == 0) {
      frames.push_back(lines[i].substr(0, kMaxFrameBytes));
    } else if (!frames.empty()) {
      break;   // the end of that thread's backtrace
    }
  }
  return frames;
}

std::vector<std::string> python_top_frames(const std::string& dump) {
  const std::vector<std::string> lines = lines_of(dump);
  std::size_t from = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("Thread 0x", 0) == 0 || lines[i].rfind("Current thread 0x", 0) == 0) from = i + 1;
  }
  std::vector<std::string> frames;
  for (std::size_t i = from; i < lines.size() && frames.size() < kTopFrames; ++i) {
    const auto text = lines[i].find_first_not_of(' ');
    if (text == std::string::npos || lines[i].compare(text, 5, "File ") != 0) break;
    frames.push_back(lines[i].substr(text, kMaxFrameBytes));
  }
  return frames;
}

namespace {

// The number after `key` in `line` ("issued 1842"), if there is one.
std::optional<std::uint64_t> number_after(const std::string& line, const std::string& key) {
  const auto at = line.find(key);
  if (at == std::string::npos) return std::nullopt;
  std::uint64_t value = 0;
  std::size_t i = at + key.size();
  if (i >= line.size() || line[i] < '0' || line[i] > '9') return std::nullopt;
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i) value = value * 10 + (line[i] - '0');
  return value;
}

constexpr char kTrainerDump[] = "dtrain-trainer pid ";
constexpr char kTraceHeader[] = "collectives of ";

// In `lines`, the last dtrain-trainer dump appended (its first line) and the header of its first trace; each
// lines.size() when there is none.
struct TrainerDump {
  std::size_t first;
  std::size_t header;
};
TrainerDump find_trainer_dump(const std::vector<std::string>& lines) {
  TrainerDump dump{lines.size(), lines.size()};
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind(kTrainerDump, 0) == 0) dump.first = i;
  for (std::size_t i = dump.first + 1; i < lines.size(); ++i) {
    if (lines[i].rfind(kTraceHeader, 0) == 0) {
      dump.header = i;
      break;
    }
  }
  return dump;
}

// The line of collective #seq in the trace that starts at `header`, or "".
std::string collective_line(const std::vector<std::string>& lines, std::size_t header, std::uint64_t seq) {
  const std::string prefix = "#" + std::to_string(seq) + " ";
  for (std::size_t i = header + 1; i < lines.size() && lines[i].rfind('#', 0) == 0; ++i)
    if (lines[i].rfind(prefix, 0) == 0) return lines[i];
  return "";
}

}  // namespace

std::vector<std::string> trainer_top_frames(const std::string& dump) {
  const std::vector<std::string> lines = lines_of(dump);
  const auto [first, header] = find_trainer_dump(lines);
  if (first == lines.size()) return {};
  std::vector<std::string> frames{lines[first].substr(0, kMaxFrameBytes)};
  if (header == lines.size()) return frames;
  frames.push_back(lines[header].substr(0, kMaxFrameBytes));
  if (const auto finished = number_after(lines[header], "finished ")) {
    const std::string pending = collective_line(lines, header, *finished + 1);
    if (!pending.empty()) frames.push_back(pending.substr(0, kMaxFrameBytes));
  }
  return frames;
}

std::optional<CollectiveState> collective_state(const std::string& dump) {
  const std::vector<std::string> lines = lines_of(dump);
  const std::size_t header = find_trainer_dump(lines).header;
  if (header == lines.size()) return std::nullopt;
  const auto issued = number_after(lines[header], "issued ");
  const auto started = number_after(lines[header], "started ");
  const auto finished = number_after(lines[header], "finished ");
  if (!issued || !started || !finished) return std::nullopt;
  CollectiveState state{*issued, *started, *finished, {}};
  const std::string line = collective_line(lines, header, *finished + 1);
  // "#K WHAT: issued at ..." -> WHAT
  const auto space = line.find(' '), colon = line.find(": issued at ");
  if (space != std::string::npos && colon != std::string::npos && colon > space) {
    state.pending = line.substr(space + 1, std::min(colon - space - 1, kMaxFrameBytes));
  }
  return state;
}

EvidenceReport collect_stacks(std::uint32_t round, const std::vector<StackTarget>& targets,
                              std::chrono::milliseconds budget) {
  const auto deadline = Clock::now() + budget;
  EvidenceReport report{round, std::vector<RankStacks>(targets.size())};
  std::vector<std::thread> threads;
  threads.reserve(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    threads.emplace_back([&, i] { report.ranks[i] = stacks_of(targets[i], deadline); });
  }
  for (auto& t : threads) t.join();
  return report;
}

void EvidenceCollector::start(const EvidenceRequest& request, std::vector<StackTarget> targets,
                              std::function<void(EvidenceReport)> done) {
  wait();
  thread_ = std::thread([request, targets = std::move(targets), done = std::move(done)] {
    done(collect_stacks(request.round, targets, request.budget));
  });
}

void EvidenceCollector::wait() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace dtrain::agent

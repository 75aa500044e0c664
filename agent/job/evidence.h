#pragma once

// Evidence about a round whose worker failed a health check (it hung, stopped, or never got to its first step),
// collected before the round is stopped, because the stop destroys it. For each worker of the round on this node
// still running, one file, <job dir>/attempt_<n>/stacks/rank_<r>.txt (placed by JobFiles, run_dir.h):
//
//   every thread's state and wchan from /proc/PID/task/TID (instant, and all there is when gdb cannot attach)
//   a Python worker's own stacks, when it announced a dump signal (worker/python/dtrain_health.py: faulthandler writes
//     every thread's Python stack to its DTRAIN_STACKS_FILE on that signal): the signal is sent first, the file
//     read back once it stops growing (at most kPythonDumpWait), and its main thread's frames are the top frames
//   then `gdb -batch -p PID -ex 'thread apply all bt'` when gdb is installed
//
// Only a worker that announced a handler is sent a signal (JobRunner::note_dump_signal).
// All workers at once, one thread each, every gdb ended by the deadline (SIGHUP, so that it detaches without passing
// a SIGINT on to the worker; then SIGKILL and SIGCONT: evidence.cpp, end_gdb), so the answer comes within the budget
// the launcher gave (Timeouts::evidence_budget) however many workers there are and whatever state they are in (a
// SIGSTOPped process, one in uninterruptible sleep). gdb is the agent's child only briefly and not a worker: the
// supervisor reaps it like any stray child (it owns waitpid in this process), so its end is watched through a pidfd.
// gdb runs in the agent's PID namespace, also when the workers have their own (a root agent's): measured, that costs
// it nothing, and the stacks file says why gdb warns about it.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::agent {

// CollectEvidence, in the agent's terms.
struct EvidenceRequest {
  std::uint32_t round = 0;
  std::chrono::milliseconds budget{0};   // answer within this
};

// One worker to look at.
struct StackTarget {
  std::uint32_t rank = 0;
  pid_t pid = 0;
  std::string path;    // where its stacks go, placed under the job's directory; "" when it could not be
  std::string error;   // why path is "" (JobFiles::place's refusal)
  int dump_signal = 0;     // the signal on which it writes its Python stacks (0: it does not: never signalled)
  std::string dump_file;   // where it writes them (its DTRAIN_STACKS_FILE, placed by the agent)
};

// What was found for one worker (Evidence.ranks on the wire).
// Where a worker's communicator stood (CollectiveState on the wire), from dtrain-trainer's dump.
struct CollectiveState {
  std::uint64_t issued = 0;
  std::uint64_t started = 0;
  std::uint64_t finished = 0;
  std::string pending;   // the oldest unfinished collective, "" when none
};

struct RankStacks {
  std::uint32_t rank = 0;
  std::string path;                     // the file written ("" when none could be)
  // The main thread's first frames: Python's (a dump), else dtrain-trainer's phase and collectives (its dump), else
  // gdb's, else each thread's state and wchan (`error` then says "main thread not captured").
  std::vector<std::string> top_frames;
  std::string error;                    // why the stacks are missing or partial, every reason ("; "); "" when complete
  std::optional<CollectiveState> collectives;
};

struct EvidenceReport {
  std::uint32_t round = 0;
  std::vector<RankStacks> ranks;
};

// How many frames (or thread lines) a RankStacks carries, and how long each may be: enough to see where a rank
// waits, small enough that thousands of ranks fit in one session message.
inline constexpr std::size_t kTopFrames = 8;
inline constexpr std::size_t kMaxFrameBytes = 200;

// Writes every target's stacks in parallel; returns within `budget` (plus the file reads after it).
EvidenceReport collect_stacks(std::uint32_t round, const std::vector<StackTarget>& targets,
                              std::chrono::milliseconds budget);

// The main thread's first frames in gdb's `thread apply all bt` output (gdb lists the threads last to first, so
// thread 1's come last); none when gdb did not get to thread 1 (it was cut short, or could not attach): another
// thread's frames are never passed off as the main thread's. At most kTopFrames, each cut to kMaxFrameBytes.
std::vector<std::string> top_frames(const std::string& gdb_output);

// The main thread's first frames in a faulthandler dump (it lists the threads newest first, so the main thread's
// come last), innermost first as gdb's; at most kTopFrames, each cut to kMaxFrameBytes.
std::vector<std::string> python_top_frames(const std::string& dump);

// dtrain-trainer's dump (trainer/health/stack_dump.h): its phase line, and for its first communicator the trace's
// header line and the oldest unfinished collective's line, as top frames (each cut to kMaxFrameBytes); empty when
// `dump` is not one.
std::vector<std::string> trainer_top_frames(const std::string& dump);
// Where the first communicator of a dtrain-trainer dump stood, from its trace (trainer/comm/trace.h's format:
// "collectives of NAME: issued N, started S, finished F", then "#K WHAT: issued at ..." per collective).
std::optional<CollectiveState> collective_state(const std::string& dump);

// How long a worker that announced a dump signal has to write its Python stacks: faulthandler writes from its
// signal handler, in milliseconds even for many threads; a process that does not in this time is stopped or
// blocked in the kernel, and gdb and /proc are still to come within the same budget.
inline constexpr std::chrono::milliseconds kPythonDumpWait{1000};

// collect_stacks on a thread of its own, so the session goes on reading (heartbeats, the stop) while gdb works.
class EvidenceCollector {
 public:
  EvidenceCollector() = default;
  EvidenceCollector(const EvidenceCollector&) = delete;
  EvidenceCollector& operator=(const EvidenceCollector&) = delete;
  ~EvidenceCollector() { wait(); }

  // Starts a collection (after the previous one ended); `done` gets the report on the collector's thread.
  void start(const EvidenceRequest& request, std::vector<StackTarget> targets,
             std::function<void(EvidenceReport)> done);
  // Until the collection in progress, if any, ended: at most its budget.
  void wait();

 private:
  std::thread thread_;
};

}  // namespace dtrain::agent

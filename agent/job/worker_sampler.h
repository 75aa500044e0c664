#pragma once

// What the agent sees of its running workers from /proc, with no help from them: every `interval` (about a second)
// each worker's CPU time so far, its main thread's state and its thread count, sent to the launcher as a
// WorkerSample. So a plain script that reports nothing still shows when it stops using CPU, sleeps in the kernel
// (state D) or was stopped (T), next to whatever health reports it sends.
//
// The sampler learns which workers run from the runner's own events (observe: WorkerStarted adds one, WorkerExited
// removes it, a new round's first start drops the last round's), so it needs nothing from JobRunner. A worker whose
// /proc entry is gone (it exited between the event and the sample) is skipped until its WorkerExited arrives.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "agent/job/worker_group.h"
#include "common/status.h"

namespace dtrain::agent {

// One process as /proc/PID/stat shows it.
struct ProcessSample {
  double cpu_seconds = 0;   // utime + stime of the whole process (every thread, reaped children excluded)
  char state = '?';         // the main thread's state: R running, S sleeping, D uninterruptible, T stopped, Z zombie...
  unsigned threads = 0;
};

// A worker's sample, as the launcher gets it (WorkerSample on the session).
struct WorkerSample {
  std::uint32_t round = 0;
  std::uint32_t rank = 0;
  ProcessSample process;
  std::uint64_t unix_ms = 0;   // this agent's clock when it sampled
};

// Parses the text of /proc/PID/stat. The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted from the last ')'. Invalid_argument naming what is missing when
// the text is not a stat line.
Result<ProcessSample> parse_proc_stat(std::string_view stat);

// Reads /proc/PID/stat; not_found when the process is gone (or the entry cannot be read, which names why).
Result<ProcessSample> sample_process(pid_t pid);

class WorkerSampler {
 public:
  using Emit = std::function<void(const WorkerSample&)>;

  // Every worker is sampled once per this: often enough that a launcher sees a stall within a heartbeat or two,
  // rarely enough that reading a few /proc files per worker costs nothing measurable.
  static constexpr std::chrono::milliseconds kDefaultInterval{1000};

  // Starts the thread; `emit` is called on it (it must not block for long: it pushes to the session's outbox).
  explicit WorkerSampler(Emit emit, std::chrono::milliseconds interval = kDefaultInterval);
  WorkerSampler(const WorkerSampler&) = delete;
  WorkerSampler& operator=(const WorkerSampler&) = delete;
  // Stops the thread; no emit after it returns.
  ~WorkerSampler();

  // The runner's events: which workers run now. Cheap; callable from any thread.
  void observe(const RunnerEvent& event);

 private:
  struct Running {
    std::uint32_t round = 0;
    pid_t pid = 0;
  };
  void run();
  void sample_all();

  const Emit emit_;
  const std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::uint32_t, Running> running_;   // by rank, the newest round's
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain::agent

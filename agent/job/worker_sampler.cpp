#include "agent/job/worker_sampler.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/stop_thread.h"
#include "common/util.h"

namespace dtrain::agent {

Result<ProcessSample> parse_proc_stat(std::string_view stat) {
  const std::size_t close = stat.rfind(')');
  if (close == std::string_view::npos) {
    return {Status{StatusCode::invalid_argument, "no ')' after the command name: not a /proc/PID/stat line"}};
  }
  // Fields from 3 on (state, ppid, ...): proc(5) numbers them from 1, with comm as field 2.
  std::istringstream rest{std::string(stat.substr(close + 1))};
  std::vector<std::string> fields{std::istream_iterator<std::string>(rest), {}};
  constexpr std::size_t kState = 0, kUtime = 11, kStime = 12, kThreads = 17;   // fields 3, 14, 15, 20
  if (fields.size() <= kThreads || fields[kState].size() != 1) {
    return {Status{StatusCode::invalid_argument, "a /proc/PID/stat line with " + std::to_string(fields.size()) +
                                                    " fields after the command name; at least 18 were expected"}};
  }
  try {
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    ProcessSample sample;
    sample.state = fields[kState][0];
    sample.cpu_seconds = static_cast<double>(std::stoull(fields[kUtime]) + std::stoull(fields[kStime])) / ticks;
    sample.threads = static_cast<unsigned>(std::stoul(fields[kThreads]));
    return {{}, sample};
  } catch (const std::exception&) {
    return {Status{StatusCode::invalid_argument, "utime, stime or num_threads of a /proc/PID/stat line is not a "
                                                "number: '" + std::string(stat) + "'"}};
  }
}

Result<ProcessSample> sample_process(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return {Status{StatusCode::not_found,
                   "cannot read " + path + ": " + std::strerror(errno) + " (the process is gone)"}};
  }
  return parse_proc_stat(line);
}

WorkerSampler::WorkerSampler(Emit emit, std::chrono::milliseconds interval)
    : emit_(std::move(emit)), interval_(interval), thread_([this] { run(); }) {}

WorkerSampler::~WorkerSampler() { stop_and_join(mutex_, stop_, wake_, thread_); }

void WorkerSampler::observe(const RunnerEvent& event) {
  std::lock_guard lock(mutex_);
  if (const auto* started = std::get_if<WorkerStarted>(&event)) {
    // A new round's first worker: the last round's are gone (its group was stopped or done before this one began).
    if (!running_.empty() && running_.begin()->second.round != started->round) running_.clear();
    running_[started->rank] = {started->round, started->pid};
  } else if (const auto* exited = std::get_if<WorkerExited>(&event)) {
    auto it = running_.find(exited->rank);
    if (it != running_.end() && it->second.round == exited->round) running_.erase(it);
  }
}

void WorkerSampler::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    sample_all();
    lock.lock();
  }
}

void WorkerSampler::sample_all() {
  std::map<std::uint32_t, Running> running;
  {
    std::lock_guard lock(mutex_);
    running = running_;
  }
  for (const auto& [rank, worker] : running) {
    Result<ProcessSample> sample = sample_process(worker.pid);
    if (!sample.ok()) continue;   // exited: its WorkerExited is on its way
    emit_({worker.round, rank, sample.value, unix_ms()});
  }
}

}  // namespace dtrain::agent

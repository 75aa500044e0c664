#include "agent/job/worker_sampler.h"

#include <unistd.h>

#include <string>
#include <string_view>
#include <variant>

#include "common/os/proc_stat.h"
#include "common/os/stop_thread.h"
#include "common/clock.h"

namespace dtrain::agent {
namespace {

ProcessSample sample_of(const ProcStat& stat) {
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  ProcessSample sample;
  sample.state = stat.state;
  sample.cpu_seconds = static_cast<double>(stat.utime + stat.stime) / ticks;
  sample.threads = stat.num_threads;
  return sample;
}

}  // namespace

Result<ProcessSample> parse_proc_stat(std::string_view stat) {
  const Result<ProcStat> parsed = dtrain::parse_proc_stat(stat);
  if (!parsed.ok()) return {parsed.status};
  return {{}, sample_of(parsed.value)};
}

Result<ProcessSample> sample_process(pid_t pid) {
  const Result<ProcStat> stat = read_proc_stat(pid);
  if (!stat.ok()) return {stat.status};
  return {{}, sample_of(stat.value)};
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

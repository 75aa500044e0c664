#include "trainer/health/reporter.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <span>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/report/step_points.h"
#include "common/status.h"
#include "common/os/stop_thread.h"
#include "trainer/common/env.h"
#include "trainer/health/phase.h"
#include "trainer/health/stack_dump.h"

namespace dtrain::trainer {
namespace {

// Reports that carry the stack-dump announcement again (stack_dump.h): enough for any start-up race, few enough to
// cost nothing.
constexpr std::uint64_t kReannouncements = 8;

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

std::unique_ptr<HealthReporter> HealthReporter::from_env() {
  std::string address = env_or_empty("DTRAIN_AGENT_ADDR");
  if (address.empty()) return nullptr;
  HealthReporterOptions options{address, env_or_empty("DTRAIN_JOB_TOKEN"), env_or_empty("DTRAIN_REPORT_TOKEN")};
  options.rank = static_cast<std::uint32_t>(
      env_setting("RANK", 0, 0, "the launcher (dtrain run/launch, torchrun) sets it for every worker"));
  options.interval = std::chrono::milliseconds(env_setting(
      "DTRAIN_HEALTH_INTERVAL_MS", static_cast<int>(options.interval.count()), 1,
      "it holds the milliseconds between health reports, which the launcher sets from health.heartbeat_timeout_s"));
  return std::make_unique<HealthReporter>(std::move(options));
}

HealthReporter::HealthReporter(HealthReporterOptions options) : options_(std::move(options)) {
  Result<std::unique_ptr<worker::ReportClient>> client =
      worker::ReportClient::open({options_.address, options_.token, options_.report_token, options_.deadline});
  if (client.ok()) {
    client_ = std::move(client.value);
  } else {
    spdlog::warn("health reports to {} are off: {}", options_.address, client.status.message());
  }
  latest_.rank = options_.rank;
  latest_.rss_bytes = resident_bytes();
  thread_ = std::thread([this] { run(); });
}

HealthReporter::~HealthReporter() { stop_and_join(mutex_, stop_, changed_, thread_); }

void HealthReporter::report(const HealthReport& report) {
  {
    std::lock_guard lock(mutex_);
    latest_ = report;
    latest_.points.clear();
    const StepPoint point{report.step, report.loss, report.step_ms, report.tokens_per_s};
    merge_points(pending_points_, std::span(&point, 1), kMaxStepPoints);
    ++steps_done_;
    fresh_ = true;
  }
  changed_.notify_all();
}

void HealthReporter::set_dump_signal(std::uint32_t signal) {
  std::lock_guard lock(mutex_);
  dump_signal_ = signal;
}

std::uint64_t HealthReporter::sent() const {
  std::lock_guard lock(mutex_);
  return sent_;
}

std::uint64_t HealthReporter::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

// Sends each new report as it comes, and the latest again whenever `interval` passed without one; on stop, what
// was not sent yet.
void HealthReporter::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait_for(lock, options_.interval, [&] { return stop_ || fresh_; });
    if (stop_ && !fresh_) return;
    HealthReport report = latest_;
    report.points = std::exchange(pending_points_, {});
    const std::uint64_t steps_done = steps_done_;
    const std::uint32_t dump_signal = dump_signal_;
    fresh_ = false;
    const bool stopping = stop_;
    const bool reannounce = sent_ + failed_ < kReannouncements;
    lock.unlock();
    // The stack-dump announcement with the first reports (stack_dump.h): the agent may have dropped the first one.
    // Before the report, not after: the agent forwards an announcement as a report of its own (step 0, no values),
    // and the launcher keeps a rank's latest, which must be the step's (a short run's last report is among these).
    if (reannounce) reannounce_stack_dump();
    const Status status = client_ ? client_->send(report, {steps_done, current_phase(), dump_signal}) : Status{};
    lock.lock();
    if (stopping) return;
    if (!client_) continue;
    if (status.ok()) {
      ++sent_;
    } else if (failed_++ % 100 == 0) {
      spdlog::warn("health report to the agent at {} failed ({} so far; training goes on): {}", options_.address,
                   failed_, status.message());
    }
  }
}

std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace dtrain::trainer

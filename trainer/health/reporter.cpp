#include "trainer/health/reporter.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/security/credentials.h"
#include "common/metadata.h"
#include "common/status.h"
#include "common/stop_thread.h"
#include "dtrain/v1/report.grpc.pb.h"
#include "trainer/health/phase.h"

namespace dtrain::trainer {
namespace {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Mutual TLS with the worker certificate when the cluster uses TLS (the agent then sets DTRAIN_TLS_*), else
// plaintext. Workers hold no cluster token.
std::shared_ptr<grpc::ChannelCredentials> worker_credentials(grpc::ChannelArguments& arguments) {
  if (env_or_empty("DTRAIN_TLS_CA").empty()) return grpc::InsecureChannelCredentials();
  auto read = [](const char* variable) {
    std::string path = env_or_empty(variable);
    std::ifstream in(path);
    if (!in) {
      throw std::runtime_error(std::string("health reports: cannot read ") + variable + " (" +
                               (path.empty() ? "unset" : path) + "); the agent writes the worker's TLS files");
    }
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string ca_pem = read("DTRAIN_TLS_CA");
  security::Identity identity{read("DTRAIN_TLS_KEY"), read("DTRAIN_TLS_CERT")};
  security::set_tls_target(arguments);
  return security::worker_channel_credentials(ca_pem, identity);
}

}  // namespace

struct HealthReporter::Channel {
  std::unique_ptr<v1::WorkerReports::Stub> stub;
};

// A non-negative integer variable, or `otherwise` when it is unset or not one.
std::uint64_t env_number(const char* name, std::uint64_t otherwise) {
  const std::string text = env_or_empty(name);
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  return text.empty() || *end != '\0' || text[0] == '-' ? otherwise : value;
}

std::unique_ptr<HealthReporter> HealthReporter::from_env() {
  std::string address = env_or_empty("DTRAIN_AGENT_ADDR");
  if (address.empty()) return nullptr;
  HealthReporterOptions options{address, env_or_empty("DTRAIN_JOB_TOKEN"), env_or_empty("DTRAIN_REPORT_TOKEN")};
  options.rank = static_cast<std::uint32_t>(env_number("RANK", 0));
  const auto interval = env_number("DTRAIN_HEALTH_INTERVAL_MS", static_cast<std::uint64_t>(options.interval.count()));
  if (interval > 0) options.interval = std::chrono::milliseconds(interval);
  return std::make_unique<HealthReporter>(std::move(options));
}

HealthReporter::HealthReporter(HealthReporterOptions options)
    : options_(std::move(options)), channel_(std::make_unique<Channel>()) {
  try {
    grpc::ChannelArguments arguments;
    auto credentials = worker_credentials(arguments);
    channel_->stub = v1::WorkerReports::NewStub(grpc::CreateCustomChannel(options_.address, credentials, arguments));
  } catch (const std::exception& e) {
    spdlog::warn("health reports to {} are off: {}", options_.address, e.what());
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
    const HealthReport report = latest_;
    const std::uint64_t steps_done = steps_done_;
    const std::uint32_t dump_signal = dump_signal_;
    fresh_ = false;
    const bool stopping = stop_;
    lock.unlock();
    const Status status = channel_->stub ? send(report, steps_done, dump_signal) : Status{};
    lock.lock();
    if (stopping) return;
    if (!channel_->stub) continue;
    if (status.ok()) {
      ++sent_;
    } else if (failed_++ % 100 == 0) {
      spdlog::warn("health report to the agent at {} failed ({} so far; training goes on): {}", options_.address,
                   failed_, status.message());
    }
  }
}

Status HealthReporter::send(const HealthReport& report, std::uint64_t steps_done, std::uint32_t dump_signal) {
  using R = v1::WorkerReport;
  using H = HealthReport;
  // Every field of HealthReport, by its WorkerReport setter.
  const std::pair<double H::*, void (R::*)(double)> amounts[] = {
      {&H::loss, &R::set_loss},
      {&H::tokens_per_s, &R::set_tokens_per_s},
      {&H::step_ms, &R::set_step_ms},
      {&H::data_wait_ms, &R::set_data_wait_ms},
      {&H::compute_ms, &R::set_compute_ms},
      {&H::comm_exposed_ms, &R::set_comm_exposed_ms},
      {&H::optimizer_ms, &R::set_optimizer_ms},
      {&H::loss_scale, &R::set_loss_scale},
  };
  const std::pair<std::uint64_t H::*, void (R::*)(std::uint64_t)> counts[] = {
      {&H::step, &R::set_step},
      {&H::rss_bytes, &R::set_rss_bytes},
      {&H::device_mem_used_bytes, &R::set_device_mem_used_bytes},
      {&H::device_mem_total_bytes, &R::set_device_mem_total_bytes},
      {&H::mem_params_bytes, &R::set_mem_params_bytes},
      {&H::mem_grads_bytes, &R::set_mem_grads_bytes},
      {&H::mem_optim_bytes, &R::set_mem_optim_bytes},
      {&H::mem_activations_bytes, &R::set_mem_activations_bytes},
      {&H::mem_gathered_peak_bytes, &R::set_mem_gathered_peak_bytes},
      {&H::comm_bytes, &R::set_comm_bytes},
  };
  R request;
  for (const auto& [field, set] : amounts) (request.*set)(report.*field);
  for (const auto& [field, set] : counts) (request.*set)(report.*field);
  request.set_rank(report.rank);
  request.set_steps_done(steps_done);
  request.set_phase(current_phase());
  request.set_dump_signal(dump_signal);
  v1::ReportAck ack;
  grpc::ClientContext context;
  context.AddMetadata(std::string(kTokenMetadata), options_.token);
  context.AddMetadata(std::string(kReportTokenMetadata), options_.report_token);
  context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  const grpc::Status status = channel_->stub->Report(&context, request, &ack);
  if (status.ok()) return {};
  return {StatusCode::unavailable, status.error_message()};
}

std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace dtrain::trainer

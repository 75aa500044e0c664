#include "trainer/health/reporter.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/security/credentials.h"
#include "common/metadata.h"
#include "common/stop_thread.h"
#include "dtrain/v1/report.grpc.pb.h"

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

std::unique_ptr<HealthReporter> HealthReporter::from_env() {
  std::string address = env_or_empty("DTRAIN_AGENT_ADDR");
  if (address.empty()) return nullptr;
  return std::make_unique<HealthReporter>(
      HealthReporterOptions{address, env_or_empty("DTRAIN_JOB_TOKEN"), env_or_empty("DTRAIN_REPORT_TOKEN")});
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
  thread_ = std::thread([this] { run(); });
}

HealthReporter::~HealthReporter() { stop_and_join(mutex_, stop_, changed_, thread_); }

void HealthReporter::report(const HealthReport& report) {
  {
    std::lock_guard lock(mutex_);
    pending_ = report;
  }
  changed_.notify_all();
}

std::uint64_t HealthReporter::sent() const {
  std::lock_guard lock(mutex_);
  return sent_;
}

std::uint64_t HealthReporter::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void HealthReporter::run() {
  for (;;) {
    HealthReport report;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || pending_.has_value(); });
      if (!pending_) return;  // stopping with nothing left to send
      report = *pending_;
      pending_.reset();
    }
    if (!channel_->stub) continue;
    v1::WorkerReport request;
    request.set_rank(report.rank);
    request.set_step(report.step);
    request.set_loss(report.loss);
    request.set_tokens_per_s(report.tokens_per_s);
    request.set_rss_bytes(report.rss_bytes);
    v1::ReportAck ack;
    grpc::ClientContext context;
    context.AddMetadata(std::string(kTokenMetadata), options_.token);
    context.AddMetadata(std::string(kReportTokenMetadata), options_.report_token);
    context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
    grpc::Status status = channel_->stub->Report(&context, request, &ack);
    std::lock_guard lock(mutex_);
    if (status.ok()) {
      ++sent_;
      continue;
    }
    if (failed_++ % 100 == 0) {
      spdlog::warn("health report to the agent at {} failed ({} so far; training goes on): {}", options_.address,
                   failed_, status.error_message());
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

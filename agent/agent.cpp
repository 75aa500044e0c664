#include "agent/agent.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/outbox.h"
#include "agent/service/report_service.h"
#include "agent/service/session_service.h"
#include "agent/service/store_service.h"
#include "common/util.h"
#include "common/version.h"

namespace dtrain::agent {
namespace {

// Watches the lease: if the launcher is silent for longer than the lease, the session is cancelled, which makes
// serve_session stop the workers. Every blocking wait here has its deadline.
class LeaseWatch {
 public:
  LeaseWatch(SessionStream& stream, std::chrono::milliseconds lease) : stream_(stream), lease_(lease) {
    thread_ = std::thread([this] { run(); });
  }
  ~LeaseWatch() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void heard() {
    std::lock_guard lock(mutex_);
    last_ = std::chrono::steady_clock::now();
  }
  void set_lease(std::chrono::milliseconds lease) {
    std::lock_guard lock(mutex_);
    lease_ = lease;
    cv_.notify_all();
  }
  bool expired() const {
    std::lock_guard lock(mutex_);
    return expired_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!done_) {
      auto deadline = last_ + lease_;
      if (std::chrono::steady_clock::now() >= deadline) {
        expired_ = true;
        spdlog::warn("launcher silent for {} ms (the lease): stopping this node's workers", lease_.count());
        lock.unlock();
        stream_.cancel();
        return;
      }
      cv_.wait_until(lock, deadline, [this] { return done_; });
    }
  }

  SessionStream& stream_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::chrono::milliseconds lease_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  bool done_ = false;
  bool expired_ = false;
  std::thread thread_;
};

}  // namespace

Agent::Agent(AgentOptions options) : options_(std::move(options)), facts_(node::gather_facts()) {}

Agent::~Agent() = default;

int Agent::run() {
  StoreService store_service(store_);
  SessionService session_service(*this);
  ReportService report_service(*this);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&session_service);
  builder.RegisterService(&store_service);
  builder.RegisterService(&report_service);
  builder.SetMaxReceiveMessageSize(80 << 20);
  builder.SetMaxSendMessageSize(80 << 20);
  // Keepalive pings let a dead peer be noticed even when no message is due.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "dtrain agent: cannot listen on %s (address in use or not on this host?)\n",
                 options_.listen.c_str());
    return 1;
  }
  std::string host = options_.advertise_host.empty() ? host_of(options_.listen) : options_.advertise_host;
  if (host == "0.0.0.0" || host.empty()) host = facts_.addresses.empty() ? "127.0.0.1" : facts_.addresses.front();
  address_ = host + ":" + std::to_string(port);
  runner_ = std::make_unique<JobRunner>(store_, host, address_);

  std::printf("dtrain-agent listening on %s\n", address_.c_str());
  std::fflush(stdout);

  int code = 0;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return terminated_by_ != 0 || (options_.one_shot && session_ended_); });
    if (terminated_by_ != 0) code = 128 + terminated_by_;
  }
  runner_->stop_and_wait(options_.default_grace, options_.default_grace + std::chrono::seconds(5));
  // Every session has ended and no worker is left: end the blocked store calls and cancel any call still open (a
  // launcher that has not hung up yet) instead of waiting for it.
  store_.shutdown();
  server->Shutdown(std::chrono::system_clock::now());
  runner_.reset();
  return code;
}

void Agent::terminate(int signal) {
  SessionStream* session = nullptr;
  {
    std::lock_guard lock(mutex_);
    terminated_by_ = signal;
    session = session_;
  }
  if (session != nullptr) session->cancel();
  changed_.notify_all();
}

std::string Agent::accept_report(const std::string& token, const v1::WorkerHealth& health) {
  if (token.empty() || token != runner_->current_token()) {
    return "the dtrain-token metadata is missing or not this round's DTRAIN_JOB_TOKEN";
  }
  if (!runner_->has_worker(health.rank())) {
    return "rank " + std::to_string(health.rank()) + " is not a worker of this node in this round";
  }
  std::lock_guard lock(mutex_);
  if (forward_) {
    v1::AgentMessage message;
    *message.mutable_worker_health() = health;
    message.mutable_worker_health()->set_unix_ms(unix_ms());
    forward_(std::move(message));
  }
  return {};
}

std::string Agent::serve_session(SessionStream& stream) {
  {
    std::lock_guard lock(mutex_);
    if (session_ != nullptr) return "this agent already serves a launcher; one job per agent at a time";
    if (terminated_by_ != 0) return "this agent is shutting down";
    session_ = &stream;
  }
  spdlog::info("session opened by {}", stream.peer());

  Outbox outbox(stream, options_.default_heartbeat);
  LeaseWatch lease(stream, options_.default_lease);
  std::chrono::milliseconds grace = options_.default_grace;
  {
    std::lock_guard lock(mutex_);
    forward_ = [&outbox](v1::AgentMessage m) { outbox.push(std::move(m)); };
  }
  runner_->set_emit([&outbox](v1::AgentMessage m) { outbox.push(std::move(m)); });

  v1::AgentMessage hello;
  auto* facts = hello.mutable_hello()->mutable_facts();
  facts->set_hostname(facts_.hostname);
  facts->set_host_id(facts_.host_id);
  for (const auto& a : facts_.addresses) facts->add_addresses(a);
  for (unsigned c : facts_.cpus) facts->add_cpus(c);
  for (int n : facts_.cpu_numa) facts->add_cpu_numa_node(n);
  facts->set_gpu_count(facts_.gpu_count);
  facts->set_dtrain_version(std::string(version()));
  facts->set_kernel(facts_.kernel);
  facts->set_unix_ms(unix_ms());
  hello.mutable_hello()->set_agent_address(address_);
  hello.mutable_hello()->set_pid(static_cast<std::uint32_t>(::getpid()));
  outbox.push(std::move(hello));

  bool goodbye = false;
  v1::LauncherMessage message;
  while (!goodbye && stream.read(message)) {
    lease.heard();
    switch (message.body_case()) {
      case v1::LauncherMessage::kConfigure: {
        const auto& c = message.configure();
        if (c.lease_ms() > 0) lease.set_lease(std::chrono::milliseconds(c.lease_ms()));
        if (c.heartbeat_interval_ms() > 0)
          outbox.set_heartbeat_interval(std::chrono::milliseconds(c.heartbeat_interval_ms()));
        grace = std::chrono::milliseconds(c.stop_grace_ms());
        spdlog::info("job {}: this is node {}", c.job_id(), c.node_rank());
        break;
      }
      case v1::LauncherMessage::kPrepareRound: {
        v1::AgentMessage reply;
        *reply.mutable_round_prepared() = runner_->prepare_round(message.prepare_round());
        outbox.push(std::move(reply));
        break;
      }
      case v1::LauncherMessage::kStartGroup: {
        std::string error = runner_->start_group(message.start_group());
        if (!error.empty()) {
          v1::AgentMessage reply;
          reply.mutable_error()->set_message(error);
          outbox.push(std::move(reply));
        }
        break;
      }
      case v1::LauncherMessage::kStopGroup:
        runner_->stop_group(message.stop_group().round(), std::chrono::milliseconds(message.stop_group().grace_ms()));
        break;
      case v1::LauncherMessage::kShutdown: {
        runner_->stop_and_wait(grace, grace + std::chrono::seconds(5));
        v1::AgentMessage reply;
        reply.mutable_goodbye();
        outbox.push(std::move(reply));
        goodbye = true;
        break;
      }
      case v1::LauncherMessage::kHeartbeat:
      case v1::LauncherMessage::BODY_NOT_SET:
        break;
    }
  }

  std::string status;
  if (!goodbye) {
    status = lease.expired() ? "lease expired" : "session lost";
    spdlog::warn("{} ({}): stopping this node's workers", status, stream.peer());
  }
  // Whatever ended the session, nothing of the job may outlive it.
  runner_->stop_and_wait(grace, grace + std::chrono::seconds(5));
  {
    std::lock_guard lock(mutex_);
    forward_ = nullptr;
  }
  runner_->set_emit(nullptr);
  outbox.flush(std::chrono::seconds(2));
  {
    std::lock_guard lock(mutex_);
    session_ = nullptr;
    session_ended_ = true;
  }
  changed_.notify_all();
  return status;
}

}  // namespace dtrain::agent

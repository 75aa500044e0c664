#include "agent/agent.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/outbox.h"
#include "agent/probe.h"
#include "agent/run_dir.h"
#include "agent/session_socket.h"
#include "agent/service/report_service.h"
#include "agent/service/session_service.h"
#include "agent/security/credentials.h"
#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "agent/security/x509.h"
#include "agent/service/store_service.h"
#include "common/deadline_guard.h"
#include "common/grpc_options.h"
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

// The agent's end of a session it dialed itself (LauncherService.Join).
class ClientSessionStream final : public SessionStream {
 public:
  ClientSessionStream(grpc::ClientContext& context,
                      grpc::ClientReaderWriter<v1::AgentMessage, v1::LauncherMessage>& stream, std::string peer)
      : context_(context), stream_(stream), peer_(std::move(peer)) {}
  bool read(v1::LauncherMessage& message) override { return stream_.Read(&message); }
  bool write(const v1::AgentMessage& message) override { return stream_.Write(message); }
  void cancel() override { context_.TryCancel(); }
  std::string peer() const override { return peer_; }

 private:
  grpc::ClientContext& context_;
  grpc::ClientReaderWriter<v1::AgentMessage, v1::LauncherMessage>& stream_;
  std::string peer_;
};

}  // namespace

Agent::Agent(AgentOptions options) : options_(std::move(options)), facts_(node::gather_facts()) {}

Agent::~Agent() = default;

int Agent::run() {
  StoreService store_service(store_);
  SessionService session_service(*this);
  ReportService report_service(*this);

  try {
    runtime_dir_.emplace(supervisor::RuntimeDir::create());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain agent: %s\n", e.what());
    return 1;
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  try {
    credentials = server_credentials();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain agent: %s\n", e.what());
    return 2;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen, credentials, &port);
  // With a session socket, no session can come in over TCP at all: the service is not there.
  if (options_.session_socket.empty()) builder.RegisterService(&session_service);
  builder.RegisterService(&store_service);
  builder.RegisterService(&report_service);
  set_session_server_options(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "dtrain agent: cannot listen on %s (address in use or not on this host?)\n",
                 options_.listen.c_str());
    return 1;
  }
  std::string host = options_.advertise_host.empty() ? host_of(options_.listen) : options_.advertise_host;
  if (host == "0.0.0.0" || host.empty()) {
    // Advertise the address this node uses to reach its launcher, else its first address.
    host = options_.join.empty() ? "" : node::source_address_towards(host_of(options_.join));
    if (host.empty()) host = facts_.addresses.empty() ? "127.0.0.1" : facts_.addresses.front();
  }
  address_ = host + ":" + std::to_string(port);
  runner_ = std::make_unique<JobRunner>(store_, host, address_);
  runner_->set_worker_env(worker_tls_env_);

  // Sessions on the private socket go to a server of their own, which has no listening port.
  std::unique_ptr<grpc::Server> session_server;
  std::unique_ptr<SessionSocket> session_socket;
  if (!options_.session_socket.empty()) {
    options_.one_shot = true;
    grpc::ServerBuilder session_builder;
    session_builder.RegisterService(&session_service);
    set_session_server_options(session_builder);
    session_server = session_builder.BuildAndStart();
    try {
      if (!session_server) throw std::runtime_error("cannot start the session server");
      session_socket = std::make_unique<SessionSocket>(options_.session_socket, *session_server);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtrain agent: %s\n", e.what());
      server->Shutdown(std::chrono::system_clock::now());
      if (session_server) session_server->Shutdown(std::chrono::system_clock::now());
      return 1;
    }
  }

  std::printf("dtrain-agent listening on %s\n", address_.c_str());
  std::fflush(stdout);
  std::thread joiner;
  if (!options_.join.empty()) {
    options_.one_shot = true;
    joiner = std::thread([this] {
      std::string status = join_launcher();
      if (!status.empty()) spdlog::error("{}", status);
      std::lock_guard lock(mutex_);
      session_ended_ = true;
      join_failed_ = !status.empty() && !joined_;
      changed_.notify_all();
    });
  }

  int code = 0;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return terminated_by_ != 0 || (options_.one_shot && session_ended_); });
    if (terminated_by_ != 0) code = 128 + terminated_by_;
    if (join_failed_) code = 1;
  }
  if (joiner.joinable()) {
    if (terminated_by_ != 0) {
      std::lock_guard lock(mutex_);
      stop_joining_ = true;
    }
    joiner.join();
  }
  runner_->stop_and_wait(options_.default_grace, options_.default_grace + std::chrono::seconds(5));
  // Every session has ended and no worker is left: end the blocked store calls and cancel any call still open (a
  // launcher that has not hung up yet) instead of waiting for it.
  store_.shutdown();
  session_socket.reset();
  if (session_server) session_server->Shutdown(std::chrono::system_clock::now());
  server->Shutdown(std::chrono::system_clock::now());
  runner_.reset();
  if (!worker_tls_dir_.empty()) std::filesystem::remove_all(worker_tls_dir_);
  return code;
}

std::shared_ptr<grpc::ServerCredentials> Agent::server_credentials() {
  // A local agent's port serves the store and health reports alone (each checks the round's token); its sessions
  // come over the private socket.
  if (!options_.session_socket.empty()) return grpc::InsecureServerCredentials();
  if (options_.insecure) {
    // Loopback is no exception: every user and container on this host can reach it.
    spdlog::warn("--insecure: sessions in plaintext without the cluster token on {}{}: anyone who reaches this "
                 "port can run commands as this user", options_.listen,
                 is_loopback_host(host_of(options_.listen)) ? " (on loopback: every user of this host)" : "");
    return grpc::InsecureServerCredentials();
  }
  // Mutual TLS with a certificate derived from the cluster CA, plus the cluster token, checked before any handler;
  // on loopback too. Worker certificates of the current job pass for the store and reports only.
  const std::string dir = options_.secret_dir.empty() ? security::default_secret_dir() : options_.secret_dir;
  security::ClusterSecret secret;
  try {
    secret = security::load_secret(dir);
  } catch (const security::SecurityError& e) {
    throw security::SecurityError(std::string(e.what()) + ". Every session needs the cluster token, on loopback too; "
                                  "--insecure accepts anyone who reaches the port instead");
  }
  auto identity = security::issue_identity(secret, facts_.hostname);
  write_worker_tls(secret);
  if (!options_.join.empty()) {
    client_credentials_ = security::channel_credentials(secret, identity);
    join_tls_ = true;
  }
  return security::server_credentials(secret, identity, admission_);
}

void Agent::write_worker_tls(const security::ClusterSecret& secret) {
  // Workers reach the store over the same mutual TLS with a worker certificate of their own (issued per job in
  // begin_job), in a directory only this user can read, removed when the agent exits.
  worker_tls_dir_ = runtime_dir_->make_subdir("tls");
  secret_ = secret;
  auto put = [this](const char* name, const std::string& text) {
    std::string path = worker_tls_dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("cannot write " + path);
    }
    ::close(fd);
    return path;
  };
  // The worker certificate itself is issued per job (begin_job); the cluster token is never given to workers.
  worker_tls_env_ = {{"DTRAIN_TLS_CA", put("ca.crt", secret.ca_cert_pem)},
                     {"DTRAIN_TLS_CERT", worker_tls_dir_ + "/worker.crt"},
                     {"DTRAIN_TLS_KEY", worker_tls_dir_ + "/worker.key"}};
}

std::string Agent::begin_job(const std::string& job_id) {
  try {
    runner_->set_job_files(JobFiles(options_.run_dir.empty() ? default_run_dir() : options_.run_dir, job_id));
    if (secret_) {
      // Written through temporary files and renamed, so a worker of the previous job never reads half a key.
      auto identity = security::issue_worker_identity(*secret_, job_id, facts_.hostname);
      for (const auto& [name, text] :
           {std::pair{"worker.key", identity.key_pem}, std::pair{"worker.crt", identity.cert_pem}}) {
        const std::string path = worker_tls_dir_ + "/" + name;
        const std::string temp = path + ".new";
        int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        bool written = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
        if (fd >= 0) ::close(fd);
        if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
          throw std::runtime_error("cannot write the workers' certificate " + path + ": " + std::strerror(errno));
        }
      }
    }
  } catch (const std::exception& e) {
    return "cannot prepare job " + job_id + " on this node: " + e.what();
  }
  admission_->admit(job_id);
  return {};
}

std::string Agent::join_launcher() {
  auto deadline = std::chrono::steady_clock::now() + options_.join_timeout;
  grpc::ChannelArguments args = session_channel_arguments();
  if (join_tls_) security::set_tls_target(args);
  // Agents usually start before their launcher listens: retry quickly instead of gRPC's default 1 s..120 s backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(options_.join, client_credentials_, args);
  auto stub = v1::LauncherService::NewStub(channel);
  std::string last_error = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mutex_);
      if (stop_joining_ || terminated_by_ != 0) return {};
    }
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1))) {
      last_error = "cannot connect";
      continue;
    }
    grpc::ClientContext context;
    auto stream = stub->Join(&context);
    ClientSessionStream session(context, *stream, options_.join);
    {
      std::lock_guard lock(mutex_);
      joined_ = true;
    }
    std::string served = serve_session(session);
    if (served.empty()) {
      // Clean goodbye: nothing more to hear from the launcher, which may already be gone; do not wait for its
      // final status.
      context.TryCancel();
      stream->Finish();
      return {};
    }
    grpc::Status status;
    {
      // The session already failed: a launcher that does not complete the call must not hold this agent.
      DeadlineGuard guard(std::chrono::seconds(2), [&context] { context.TryCancel(); });
      status = stream->Finish();
    }
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      return "the launcher at " + options_.join + " ended the session: " +
             security::explain_connect_failure(options_.join, status,
                                               join_tls_ ? security::Transport::tls : security::Transport::plaintext);
    }
    return served;
  }
  return "could not join the launcher at " + options_.join + " within " +
         std::to_string(options_.join_timeout.count()) + " ms (" + last_error +
         "); is `dtrain launch` running with nodes.rendezvous " + options_.join + "?";
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

std::string Agent::check_reporter(const std::string& token, const std::string& report_token,
                                  std::uint32_t rank) const {
  if (!runner_) return "the agent is still starting";
  if (token.empty() || !security::x509::constant_time_equal(token, runner_->current_token())) {
    return "the dtrain-token metadata is missing or not this round's DTRAIN_JOB_TOKEN";
  }
  return runner_->check_reporter(rank, report_token);
}

void Agent::forward_report(const v1::WorkerHealth& health) {
  std::lock_guard lock(mutex_);
  if (forward_) {
    v1::AgentMessage message;
    *message.mutable_worker_health() = health;
    message.mutable_worker_health()->set_unix_ms(unix_ms());
    forward_(std::move(message));
  }
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
  for (const auto& [name, address] : facts_.interfaces) {
    auto* i = facts->add_interfaces();
    i->set_name(name);
    i->set_address(address);
  }
  for (unsigned c : facts_.cpus) facts->add_cpus(c);
  for (int n : facts_.cpu_numa) facts->add_cpu_numa_node(n);
  facts->set_gpu_count(facts_.gpu_count);
  facts->set_dtrain_version(std::string(version()));
  facts->set_kernel(facts_.kernel);
  facts->set_unix_ms(unix_ms());
  hello.mutable_hello()->set_agent_address(address_);
  hello.mutable_hello()->set_pid(static_cast<std::uint32_t>(::getpid()));
  if (options_.slot) hello.mutable_hello()->set_slot(*options_.slot);
  outbox.push(std::move(hello));

  bool goodbye = false;
  Prober prober;
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
        if (std::string error = begin_job(c.job_id()); !error.empty()) {
          v1::AgentMessage reply;
          reply.mutable_error()->set_message(error);
          outbox.push(std::move(reply));
        }
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
      case v1::LauncherMessage::kProbe: {
        // The disk check looks where this agent would write the job's logs, not at a path the launcher names.
        v1::Probe probe = message.probe();
        probe.set_log_dir(options_.run_dir.empty() ? default_run_dir() : options_.run_dir);
        v1::AgentMessage reply;
        *reply.mutable_probe_result() = prober.answer(probe);
        outbox.push(std::move(reply));
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
  // The job is over here: its worker certificates open nothing on this agent any more.
  admission_->close();
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

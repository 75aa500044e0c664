#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/job/evidence.h"
#include "agent/job/run_dir.h"
#include "agent/job/worker_sampler.h"
#include "agent/node/probe.h"
#include "agent/security/credentials.h"
#include "agent/security/x509.h"
#include "agent/service/health_socket.h"
#include "agent/service/report_service.h"
#include "agent/service/session_service.h"
#include "agent/service/store_service.h"
#include "agent/session/join_client.h"
#include "agent/session/lease_watch.h"
#include "agent/session/outbox.h"
#include "agent/session/session_socket.h"
#include "agent/session/session_stream.h"
#include "agent/session/wire.h"
#include "common/grpc/grpc_options.h"
#include "common/transport.h"
#include "common/util.h"
#include "common/version.h"

namespace dtrain::agent {
namespace {

// How long past its grace a stop may take before the agent goes on without it: SIGKILLed processes still have to
// be reaped, and one stuck in the kernel must not hold the session or the agent's exit for ever.
constexpr std::chrono::seconds kStopSweepMargin{5};
// How long a session's last messages (WorkerExited, GroupStopped, Goodbye) may take to leave once it ends.
constexpr std::chrono::seconds kFinalFlushTimeout{2};

// gRPC shuts its library down when its last object goes (here: the servers, at the end of run()), and that joins
// its executor threads; one may be inside a poll that lasts seconds. After two workers wrote a 100 MiB line each,
// that held the agent 5-6.5 s past the end of its session, long enough for the launcher to kill it. Everything of
// the agent's is closed by then and the process ends with _Exit (cli/main.cpp), so gRPC stays initialised for the
// life of the process instead: one reference, never released.
void keep_grpc_initialised() {
  static const bool held = [] {
    grpc_init();
    return true;
  }();
  (void)held;
}

}  // namespace

// The agent's gRPC servers, for the life of run(). Declared in the order they are built; destroyed the other way.
struct Agent::Servers {
  explicit Servers(Agent& agent) : store_service(agent.store_), session_service(agent), report_service(agent) {}

  StoreService store_service;
  SessionService session_service;
  ReportService report_service;
  std::unique_ptr<grpc::Server> server;           // the agent's port (listen)
  std::unique_ptr<grpc::Server> session_server;   // sessions on the private socket: a server with no port
  std::unique_ptr<SessionSocket> session_socket;
  std::unique_ptr<HealthSocket> health_socket;   // reports as datagrams (Python workers); null when it cannot bind
};

// The gRPC credentials run() serves and dials with: made here, at the transport edge, so agent.h names no gRPC type.
struct Agent::Credentials {
  std::shared_ptr<grpc::ServerCredentials> port;   // the agent's port (listen)
  std::shared_ptr<grpc::ChannelCredentials> join;  // --join: dialing the launcher; null without --join
};

// What one session holds while it is served. Declared in the order serve_session needs them.
struct Agent::Session {
  Session(SessionStream& stream, const AgentOptions& options)
      : stream(stream),
        outbox(stream, options.default_heartbeat),
        lease(stream, options.default_lease),
        grace(options.default_grace) {}

  SessionStream& stream;
  Outbox outbox;
  LeaseWatch lease;
  std::chrono::milliseconds grace;   // for stops the agent decides itself (Configure's stop_grace)
  Prober prober;
  bool goodbye = false;              // the launcher's Shutdown was answered
  std::string job_id;                // Configure's
  // Each running worker's /proc, every second; its thread pushes to the outbox, so it ends before the outbox goes.
  WorkerSampler sampler{[this](const WorkerSample& sample) { outbox.push(wire::to_wire(sample)); }};
  EvidenceCollector evidence;        // last: its thread, which pushes to the outbox, ends first
};

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      facts_(node::gather_facts()),
      admission_(std::make_shared<security::WorkerAdmission>()) {
  facts_.topology = options_.topology;
  // A saved topology describes the node's GPUs where the driver cannot (no NVML, or a test host): its GPUs count.
  if (!facts_.topology.ranks.empty()) facts_.gpu_count = static_cast<unsigned>(facts_.topology.ranks.size());
}

Agent::~Agent() = default;

int Agent::run() {
  keep_grpc_initialised();
  Credentials credentials;
  if (int code = prepare(credentials); code != 0) return code;
  Servers servers(*this);
  if (int code = start_servers(servers, credentials); code != 0) return code;

  if (!options_.job_command) {
    std::printf("dtrain-agent listening on %s\n", address_.c_str());
    std::fflush(stdout);
  }
  runner_->set_console(options_.console);
  std::optional<JoinClient> join;
  std::thread joiner;
  if (!options_.join.empty()) {
    options_.one_shot = true;
    join.emplace(JoinTarget{options_.join, options_.join_timeout, session_transport(options_.join, options_.insecure),
                            credentials.join},
                 [this](SessionStream& stream) {
                   Served served;
                   served.status = serve_session(stream, &served.answered);
                   return served;
                 });
    joiner = std::thread([this, &join] {
      const Status status = join->run();
      if (!status.ok()) spdlog::error("{}", status.message());
      std::lock_guard lock(mutex_);
      session_ended_ = true;
      join_failed_ = !status.ok() && !join->joined();
      changed_.notify_all();
    });
  }
  const int code = wait_until_done();
  if (joiner.joinable()) {
    // Terminated before a session: stop retrying the launcher (a served session was cancelled by terminate()).
    if (code != 0) join->stop();
    joiner.join();
  }
  shut_down(servers);
  if (options_.exit_when_done) {
    runtime_dir_.reset();   // its files (the workers' TLS files) are removed here; the PID namespace's holder ends
                            // when this process does (its lifeline), with nothing left in it
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}

int Agent::prepare(Credentials& credentials) {
  try {
    runtime_dir_.emplace(supervisor::RuntimeDir::create());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain agent: %s\n", e.what());
    return 1;
  }
  try {
    make_port_credentials(credentials);
    if (!options_.join.empty()) make_join_credentials(credentials);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain agent: %s\n", e.what());
    return 2;
  }
  return 0;
}

int Agent::start_servers(Servers& servers, const Credentials& credentials) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen, credentials.port, &port);
  // With a session socket, no session can come in over TCP at all: the service is not there.
  if (options_.session_socket.empty()) builder.RegisterService(&servers.session_service);
  builder.RegisterService(&servers.store_service);
  builder.RegisterService(&servers.report_service);
  set_session_server_options(builder);
  servers.server = builder.BuildAndStart();
  if (!servers.server || port == 0) {
    std::fprintf(stderr, "dtrain agent: cannot listen on %s (address in use or not on this host?)\n",
                 options_.listen.c_str());
    return 1;
  }
  const std::string host = advertised_host();
  address_ = host + ":" + std::to_string(port);
  // A session socket means a launcher started this agent for its job: workers come right away.
  runner_ = std::make_unique<JobRunner>(store_, host, address_, !options_.session_socket.empty());
  servers.health_socket = start_health_socket();
  return options_.session_socket.empty() ? 0 : start_session_socket(servers);
}

std::string Agent::advertised_host() const {
  std::string host = options_.advertise_host.empty() ? host_of(options_.listen) : options_.advertise_host;
  if (host == "0.0.0.0" || host.empty()) {
    // Advertise the address this node uses to reach its launcher, else its first address.
    host = options_.join.empty() ? "" : node::source_address_towards(host_of(options_.join));
    if (host.empty()) host = facts_.addresses.empty() ? "127.0.0.1" : facts_.addresses.front();
  }
  return host;
}

int Agent::start_session_socket(Servers& servers) {
  // Sessions on the private socket go to a server of their own, which has no listening port.
  options_.one_shot = true;
  grpc::ServerBuilder session_builder;
  session_builder.RegisterService(&servers.session_service);
  set_session_server_options(session_builder);
  servers.session_server = session_builder.BuildAndStart();
  try {
    if (!servers.session_server) throw std::runtime_error("cannot start the session server");
    servers.session_socket = std::make_unique<SessionSocket>(options_.session_socket, *servers.session_server);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain agent: %s\n", e.what());
    servers.server->Shutdown(std::chrono::system_clock::now());
    if (servers.session_server) servers.session_server->Shutdown(std::chrono::system_clock::now());
    return 1;
  }
  return 0;
}

int Agent::wait_until_done() {
  std::unique_lock lock(mutex_);
  const auto done = [this] { return terminated_by_ != 0 || (options_.one_shot && session_ended_); };
  while (!done()) {
    if (interrupt_sent_ == 0) {
      changed_.wait(lock);
    } else if (changed_.wait_until(lock, interrupt_deadline_) == std::cv_status::timeout && !done()) {
      std::fprintf(stderr, "dtrain run: the launcher did not end the job within %lld s of the interrupt; stopping this "
                           "node's workers\n",
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                       options_.default_grace + kInterruptWait).count()));
      terminated_by_ = interrupt_sent_;
      if (session_ != nullptr) session_->cancel();
    }
  }
  if (join_failed_) return 1;
  if (terminated_by_ != 0) return 128 + terminated_by_;
  if (options_.job_command) {
    // An exit status is 0-255; anything else from the launcher is a failure, not a wrapped number.
    if (job_exit_code_) return *job_exit_code_ >= 0 && *job_exit_code_ <= 255 ? *job_exit_code_ : 1;
    std::fprintf(stderr, "dtrain run: the session with the launcher at %s ended without saying how the job ended "
                         "(the launcher died, or the network to it failed): this node's workers were stopped\n",
                 options_.join.c_str());
    return 1;
  }
  return 0;
}

void Agent::shut_down(Servers& servers) {
  runner_->stop_and_wait(options_.default_grace, options_.default_grace + kStopSweepMargin);
  // Every session has ended and no worker is left: end the blocked store calls and cancel any call still open (a
  // launcher that has not hung up yet) instead of waiting for it.
  store_.shutdown();
  servers.session_socket.reset();
  runner_->set_before_exit({});   // it drains the health socket
  servers.health_socket.reset();   // its thread calls into runner_
  // run() ends the process next: the servers, their threads and the runner go with it, untouched meanwhile (a call
  // that still arrives finds every object alive, and no worker is left to make one).
  if (options_.exit_when_done) return;
  if (servers.session_server) servers.session_server->Shutdown(std::chrono::system_clock::now());
  servers.server->Shutdown(std::chrono::system_clock::now());
  runner_.reset();
  worker_tls_.reset();
}

const Agent::ClusterIdentity& Agent::cluster_identity() {
  if (cluster_) return *cluster_;
  const std::string dir = options_.secret_dir.empty() ? security::default_secret_dir() : options_.secret_dir;
  security::ClusterSecret secret;
  try {
    secret = security::load_secret(dir);
  } catch (const security::SecurityError& e) {
    throw security::SecurityError(std::string(e.what()) + ". Every session needs the cluster token, on loopback too; "
                                  "--insecure accepts anyone who reaches the port instead");
  }
  auto identity = security::issue_identity(secret, facts_.hostname);
  return cluster_.emplace(ClusterIdentity{std::move(secret), std::move(identity)});
}

void Agent::make_port_credentials(Credentials& credentials) {
  const bool sessions_on_socket = !options_.session_socket.empty();
  if (agent_port_transport(options_.listen, sessions_on_socket, options_.insecure) == Transport::plaintext) {
    // A local agent's port serves the store and health reports alone (each checks the round's token); its sessions
    // come over the private socket. Otherwise plaintext is --insecure's doing, and loopback is no exception: every
    // user and container on this host can reach it.
    if (!sessions_on_socket && options_.insecure) {
      spdlog::warn("--insecure: sessions in plaintext without the cluster token on {}{}: anyone who reaches this "
                   "port can run commands as this user", options_.listen,
                   is_loopback_host(host_of(options_.listen)) ? " (on loopback: every user of this host)" : "");
    }
    credentials.port = grpc::InsecureServerCredentials();
    return;
  }
  // Mutual TLS with a certificate derived from the cluster CA, plus the cluster token, checked before any handler;
  // on loopback too. Worker certificates of the current job pass for the store and reports only.
  const ClusterIdentity& cluster = cluster_identity();
  worker_tls_.emplace(runtime_dir_->make_subdir("tls"), cluster.secret);
  credentials.port = security::server_credentials(cluster.secret, cluster.identity, admission_);
}

void Agent::make_join_credentials(Credentials& credentials) {
  if (session_transport(options_.join, options_.insecure) == Transport::plaintext) {
    credentials.join = grpc::InsecureChannelCredentials();
    return;
  }
  const ClusterIdentity& cluster = cluster_identity();
  credentials.join = security::channel_credentials(cluster.secret, cluster.identity);
}

std::string Agent::run_dir() const { return options_.run_dir.empty() ? default_run_dir() : options_.run_dir; }

Status Agent::begin_job(const std::string& job_id) {
  const std::string where = "cannot prepare job " + job_id + " on this node: ";
  Result<JobFiles> files = JobFiles::for_job(run_dir(), job_id);
  if (!files.ok()) return {StatusCode::invalid_argument, where + files.status.message()};
  try {
    runner_->set_job_files(std::move(files.value));
    if (worker_tls_) worker_tls_->issue_for_job(job_id, facts_.hostname);
  } catch (const std::exception& e) {
    return {StatusCode::internal, where + e.what()};
  }
  admission_->admit(job_id);
  return {};
}

void Agent::terminate(int signal) {
  SessionStream* session = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (options_.job_command && interrupt_sent_ == 0 && outbox_ != nullptr) {
      // Ctrl-C on this node stops the whole job: the launcher stops every node and ends the sessions with Shutdown.
      interrupt_sent_ = signal;
      interrupt_deadline_ = std::chrono::steady_clock::now() + options_.default_grace + kInterruptWait;
      outbox_->push(wire::interrupt_message(signal));
      std::fprintf(stderr, "dtrain run: %s: asking the launcher to stop the job on every node (send it again to stop "
                           "this node's workers at once)\n", signal_name(signal) ? signal_name(signal) : "signal");
      changed_.notify_all();
      return;
    }
    terminated_by_ = signal;
    session = session_;
  }
  if (session != nullptr) session->cancel();
  changed_.notify_all();
}

Status Agent::check_reporter(const std::string& token, const std::string& report_token, std::uint32_t rank) const {
  if (!runner_) return {StatusCode::unavailable, "the agent is still starting"};
  if (token.empty() || !security::x509::constant_time_equal(token, runner_->current_token())) {
    return {StatusCode::permission_denied, "the dtrain-token metadata is missing or not this round's DTRAIN_JOB_TOKEN"};
  }
  return runner_->check_reporter(rank, report_token);
}

void Agent::forward_report(const v1::WorkerHealth& health) {
  std::lock_guard lock(mutex_);
  if (outbox_ != nullptr) outbox_->push_report(wire::to_wire(health, unix_ms()));
}

Status Agent::serve_session(SessionStream& stream, bool* answered) {
  if (Status refused = open_session(stream); !refused.ok()) return refused;
  spdlog::info("session opened by {}", stream.peer());
  Session session(stream, options_);
  {
    std::lock_guard lock(mutex_);
    outbox_ = &session.outbox;
  }
  runner_->set_emit([&session](RunnerEvent event) {
    session.sampler.observe(event);
    session.outbox.push(wire::to_wire(event));
  });
  say_hello(session);
  v1::LauncherMessage message;
  while (!session.goodbye && stream.read(message)) {
    session.lease.heard();
    handle(session, message);
  }
  if (answered) *answered = !session.job_id.empty();
  return close_session(session);
}

Status Agent::open_session(SessionStream& stream) {
  std::lock_guard lock(mutex_);
  if (session_ != nullptr) {
    return {StatusCode::failed_precondition, "this agent already serves a launcher; one job per agent at a time"};
  }
  if (terminated_by_ != 0) return {StatusCode::unavailable, "this agent is shutting down"};
  session_ = &stream;
  return {};
}

void Agent::say_hello(Session& session) {
  AgentHello hello{facts_, std::string(version()), unix_ms(), address_, static_cast<std::uint32_t>(::getpid()),
                   options_.slot};
  session.outbox.push(wire::to_wire(hello));
}

void Agent::handle(Session& session, const v1::LauncherMessage& message) {
  switch (message.body_case()) {
    case v1::LauncherMessage::kConfigure:
      configure(session, wire::from_wire(message.configure()));
      break;
    case v1::LauncherMessage::kPrepareRound:
      session.outbox.push(wire::to_wire(runner_->prepare_round(wire::from_wire(message.prepare_round()))));
      break;
    case v1::LauncherMessage::kStartGroup:
      session.outbox.set_report_window(std::chrono::milliseconds(message.start_group().report_window_ms()));
      if (Status status = runner_->start_group(wire::from_wire(message.start_group())); !status.ok()) {
        session.outbox.push(wire::error_message(status));
      } else if (options_.on_group && message.start_group().workers_size() > 0) {
        std::uint32_t first = message.start_group().workers(0).rank();
        for (const auto& w : message.start_group().workers()) first = std::min(first, w.rank());
        options_.on_group(session.job_id, first);
      }
      break;
    case v1::LauncherMessage::kStopGroup: {
      const StopRequest stop = wire::from_wire(message.stop_group());
      runner_->stop_group(stop.round, stop.grace);
      break;
    }
    case v1::LauncherMessage::kShutdown:
      if (message.shutdown().has_job_exit_code()) {
        std::lock_guard lock(mutex_);
        job_exit_code_ = message.shutdown().job_exit_code();
      }
      runner_->stop_and_wait(session.grace, session.grace + kStopSweepMargin);
      session.outbox.push(wire::goodbye_message());
      session.goodbye = true;
      break;
    case v1::LauncherMessage::kProbe: {
      // The disk check looks where this agent would write the job's logs, not at a path the launcher names.
      ProbeRequest probe = wire::from_wire(message.probe());
      probe.log_dir = run_dir();
      session.outbox.push(wire::to_wire(session.prober.answer(probe)));
      break;
    }
    case v1::LauncherMessage::kCollectEvidence: {
      const EvidenceRequest request = wire::from_wire(message.collect_evidence());
      session.evidence.start(request, runner_->stack_targets(request.round),
                             [&session](EvidenceReport report) { session.outbox.push(wire::to_wire(report)); });
      break;
    }
    case v1::LauncherMessage::kHeartbeat:
    case v1::LauncherMessage::BODY_NOT_SET:
      break;
  }
}

void Agent::configure(Session& session, const SessionConfig& config) {
  if (config.lease.count() > 0) session.lease.set_lease(config.lease);
  if (config.heartbeat_interval.count() > 0) session.outbox.set_heartbeat_interval(config.heartbeat_interval);
  session.grace = config.stop_grace;
  spdlog::info("job {}: this is node {}", config.job_id, config.node_rank);
  session.job_id = config.job_id;
  if (Status status = begin_job(config.job_id); !status.ok()) session.outbox.push(wire::error_message(status));
}

Status Agent::close_session(Session& session) {
  Status status;
  if (!session.goodbye) {
    status = session.lease.expired() ? Status{StatusCode::deadline_exceeded, "lease expired"}
                                     : Status{StatusCode::unavailable, "session lost"};
    spdlog::warn("{} ({}): stopping this node's workers", status.message(), session.stream.peer());
  }
  // Whatever ended the session, nothing of the job may outlive it.
  runner_->stop_and_wait(session.grace, session.grace + kStopSweepMargin);
  {
    std::lock_guard lock(mutex_);
    outbox_ = nullptr;
  }
  runner_->set_emit(nullptr);
  session.evidence.wait();
  // The job is over here: its worker certificates open nothing on this agent any more.
  admission_->close();
  session.outbox.flush(kFinalFlushTimeout);
  {
    std::lock_guard lock(mutex_);
    session_ = nullptr;
    // A joined agent whose hello was never answered dials again (JoinClient::run): its session is not over until
    // the joiner says so.
    if (options_.join.empty() || !session.job_id.empty()) session_ended_ = true;
  }
  changed_.notify_all();
  return status;
}

}  // namespace dtrain::agent

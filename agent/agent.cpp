#include "agent/agent.h"
#include "agent/agent_servers.h"

#include <cstdio>
#include <thread>

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/job/run_dir.h"
#include "agent/node/cpu_gemm.h"
#include "agent/security/credentials.h"
#include "agent/session/join_client.h"
#include "agent/session/outbox.h"
#include "agent/session/session_stream.h"
#include "agent/session/wire.h"
#include "common/transport.h"
#include "common/os/syscalls.h"

namespace dtrain::agent {
namespace {

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

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      facts_(node::gather_facts()),
      admission_(std::make_shared<security::WorkerAdmission>()) {
  facts_.topology = options_.topology;
  // A saved topology describes the node's GPUs where the driver cannot (no NVML, or a test host): its GPUs count.
  if (!facts_.topology.ranks.empty()) facts_.gpu_count = static_cast<unsigned>(facts_.topology.ranks.size());
  // The peak of this node's CPU ranks' MFU: the rate `dtrain doctor` cached, read once, as the agent starts.
  const Result<node::CpuGemmRate> gemm = node::read_node_cpu_gemm();
  if (gemm.ok()) {
    facts_.cpu_gemm_flops = gemm.value.flops_per_s;
    facts_.cpu_gemm_threads = gemm.value.threads;
  } else if (gemm.status.code() != StatusCode::not_found) {
    spdlog::warn("{} (CPU ranks' MFU stays unknown)", gemm.status.message());
  }
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
  forget_health_socket();          // the runner's before_exit drains it
  servers.health_socket.reset();   // its thread calls into the runner
  // run() ends the process next: the servers, their threads and the runner go with it, untouched meanwhile (a call
  // that still arrives finds every object alive, and no worker is left to make one).
  if (options_.exit_when_done) return;
  if (servers.session_server) servers.session_server->Shutdown(std::chrono::system_clock::now());
  servers.server->Shutdown(std::chrono::system_clock::now());
  runner_.reset();
  worker_tls_.reset();
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

}  // namespace dtrain::agent

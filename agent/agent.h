#pragma once

// The node agent: a gRPC server (session, store, worker reports) and the JobRunner that runs this node's workers.
// Layering: Agent (server, sessions, lease) -> JobRunner (rounds) -> Supervisor (processes). The session loop
// converts between messages and domain types at its edge (wire.h); below it nothing sees a message.
//
// No gRPC or protobuf header here: the servers, their credentials and the session's stream are defined in
// agent.cpp and the service/ and session/ files; this header only names them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agent/job/job_runner.h"
#include "agent/job/worker_tls.h"
#include "agent/node/facts.h"
#include "agent/service/agent_ports.h"
#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "agent/session/session_types.h"
#include "agent/store/store.h"
#include "agent/supervisor/runtime_dir.h"
#include "common/status.h"

namespace dtrain::v1 {
class LauncherMessage;
class WorkerHealth;
}  // namespace dtrain::v1

namespace dtrain::security {
class WorkerAdmission;
}  // namespace dtrain::security

namespace dtrain::agent {

class HealthSocket;
class Outbox;
class SessionStream;
struct HealthDatagram;

struct AgentOptions {
  std::string listen = "127.0.0.1:0";   // host:port the server binds; port 0 picks a free one
  std::string advertise_host;           // address peers use to reach this node; empty = the listen host
  bool one_shot = false;                // exit after the first session ends (agents a local launcher starts)
  // run() ends the process itself (std::_Exit with its code) once its workers are gone and its files removed,
  // without shutting its gRPC servers down: draining their thread pools took 4-9 ms of every local job's end, and
  // the process's end closes their connections anyway (its session has ended by then). For `dtrain agent`, whose
  // process ends with run(); an Agent in a process that goes on (tests) leaves it false.
  bool exit_when_done = false;
  std::string join;                     // host:port of a launcher to dial (LauncherService.Join); implies one_shot
  std::chrono::milliseconds join_timeout{60000};   // keep retrying the launcher this long
  bool insecure = false;                // plaintext sessions without the cluster token (warned about at start)
  std::string secret_dir;               // cluster secret for TLS + token ("" = $DTRAIN_SECRET_DIR or ~/.dtrain)
  // Agents a launcher starts itself (provider local): sessions come only over this Unix socket, from the process
  // that started the agent (SO_PEERCRED: same uid, pid = parent), never over `listen`, which then serves the store
  // and health reports alone (see session_socket.h). The socket's directory must be private to this user.
  std::string session_socket;
  // Where this agent places every file of a job: <run_dir>/<job id>/ holds attempt_<n>/rank_<r>.log and
  // rank_<r>_error.json. Launchers name these files relative to that directory; anything else is refused (run_dir.h).
  // "" = default_run_dir().
  std::string run_dir;
  std::optional<unsigned> slot;         // position in the launcher's host list (--slot), sent in the hello
  node::topo::NodeTopology topology;    // sent in the hello: the live scan's, or --topology FILE's
  std::chrono::milliseconds default_lease{10000};   // until the launcher's Configure says otherwise
  std::chrono::milliseconds default_grace{10000};   // stop grace when the session is lost before Configure
  std::chrono::milliseconds default_heartbeat{1000};
  // `dtrain run` on a node of a multi-node job (cli/run/multi_node.h). run() then returns the job's exit code from
  // the launcher's Shutdown (1, said on stderr, when the session ends without one). The first SIGINT, SIGTERM or
  // SIGHUP asks the launcher to stop the whole job (Interrupt) instead of stopping this node alone; this node's
  // workers are stopped on their own at a second signal, or when no Shutdown came within the stop grace +
  // kInterruptWait. No "listening on" line on stdout, which carries the workers' lines.
  bool job_command = false;
  // Which of this node's workers' lines this process writes on its own stdout and stderr, as "[rank] line" like
  // the launcher's console; null writes none. Whatever the launcher's console shows is unchanged by it.
  std::function<bool(std::uint32_t rank, std::uint32_t local_rank)> console;
  // Called when a round's workers start on this node, with the job and the group's lowest rank (from the session's
  // thread).
  std::function<void(const std::string& job_id, std::uint32_t first_rank)> on_group;
};

class Agent final : public SessionHost, public ReportSink {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();

  // Runs until terminate() or, for one_shot, until the first session ended. Prints
  // "dtrain-agent listening on HOST:PORT" on stdout once the server accepts connections.
  // Returns the process exit code.
  int run();

  // Serves one session to its end; used by whichever service carried it in. Ok after the launcher's Shutdown;
  // otherwise why the session was refused or ended (unavailable). `answered`, when given, says whether the launcher
  // answered the hello (sent Configure): a joined agent whose session ended unanswered dials again (JoinClient).
  Status serve_session(SessionStream& stream, bool* answered = nullptr) override;

  // Whether a health report may speak for `rank`: `token` must be the current round's job token and `report_token`
  // that rank's own DTRAIN_REPORT_TOKEN (JobRunner::check_reporter). Ok when it may; else permission_denied saying
  // why not, or unavailable while the agent is still starting (no round can exist yet).
  Status check_reporter(const std::string& token, const std::string& report_token, std::uint32_t rank) const override;
  // Forwards an accepted health report on the session.
  void forward_report(const v1::WorkerHealth& health) override;
  // A report from the health socket (health_socket.h): the same token and value checks as a gRPC report, then
  // forwarded; an announced dump signal is kept for the evidence (JobRunner::note_dump_signal). Ok when accepted.
  Status accept_datagram(const HealthDatagram& datagram);

  // From the signal thread: stop the workers, end the session, leave run(). With job_command, the first signal during
  // a session asks the launcher to stop the job instead (AgentOptions::job_command).
  void terminate(int signal);
  // How long after an Interrupt the launcher's Shutdown is waited for, beyond the stop grace.
  static constexpr std::chrono::seconds kInterruptWait{10};

 private:
  // How long past its grace a stop may take before the agent goes on without it: SIGKILLed processes still have to
  // be reaped, and one stuck in the kernel must not hold the session or the agent's exit for ever.
  static constexpr std::chrono::seconds kStopSweepMargin{5};

  struct Servers;       // the gRPC servers of run()
  struct Session;       // what one session holds while it is served (agent_session.cpp)
  struct Credentials;   // the gRPC credentials of the agent's port and of --join
  // This node's identity in the cluster, issued from the cluster secret; loaded once, for the port or the join.
  struct ClusterIdentity {
    security::ClusterSecret secret;
    security::Identity identity;
  };

  const ClusterIdentity& cluster_identity();
  // The agent's port: TLS + cluster token, loopback included, or plaintext as common/transport.h decides
  // (agent_port_transport: --insecure, or the store and reports of an agent whose sessions come over its private
  // socket), into credentials.port. Throws security::SecurityError when TLS needs a cluster secret that cannot be
  // loaded.
  void make_port_credentials(Credentials& credentials);
  // --join: the credentials for dialing the launcher (session_transport of the join address), into
  // credentials.join.
  void make_join_credentials(Credentials& credentials);
  // Steps of run(); each returns 0 or the exit code to leave with.
  int prepare(Credentials& credentials);
  int start_servers(Servers& servers, const Credentials& credentials);
  std::string advertised_host() const;
  int start_session_socket(Servers& servers);
  // The health socket in the runtime directory, and what workers need to use it, into `hooks`: DTRAIN_HEALTH_SOCKET,
  // the helper's directories for PYTHONPATH, the drain before each exit. Null when it cannot be bound: the agent
  // still runs, its workers report over gRPC alone. In agent_health.cpp, with accept_datagram.
  std::unique_ptr<HealthSocket> start_health_socket(JobRunnerHooks& hooks);
  // The runner's before_exit: drains the health socket while there is one; forget_health_socket (before the socket
  // goes) ends that.
  void drain_health_socket();
  void forget_health_socket();
  int wait_until_done();
  void shut_down(Servers& servers);

  // A job begins (Configure): workers of this job get a fresh worker certificate (TLS clusters), and the token check
  // admits certificates of this job alone. Fails with what to tell the launcher.
  Status begin_job(const std::string& job_id);
  // options_.run_dir, or default_run_dir().
  std::string run_dir() const;
  // Steps of serve_session (agent_session.cpp).
  Status open_session(SessionStream& stream);
  void say_hello(Session& session);
  void handle(Session& session, const v1::LauncherMessage& message);
  void configure(Session& session, const SessionConfig& config);
  Status close_session(Session& session);

  AgentOptions options_;
  node::Facts facts_;
  store::Store store_;
  std::unique_ptr<JobRunner> runner_;
  // runner_ once made, for the report checks: the servers and the health socket take reports on their threads from
  // before the runner exists (check_reporter says "still starting" until then).
  std::atomic<JobRunner*> reporting_runner_{nullptr};
  std::mutex health_socket_mutex_;
  HealthSocket* health_socket_ = nullptr;   // Servers' socket while it lives (drain_health_socket)
  std::string address_;   // host:port advertised to the launcher and to workers

  std::mutex mutex_;
  std::condition_variable changed_;
  SessionStream* session_ = nullptr;   // the one session being served
  Outbox* outbox_ = nullptr;           // its outbox, where accepted health reports are forwarded
  bool session_ended_ = false;
  bool join_failed_ = false;   // --join: never got a session
  std::optional<supervisor::RuntimeDir> runtime_dir_;  // private files; dead agents' leftovers swept at start
  std::optional<ClusterIdentity> cluster_;
  std::optional<WorkerTls> worker_tls_;                 // TLS: the workers' CA and per-job certificate
  // Jobs whose worker certificates the token check accepts: the current session's (credentials.h).
  std::shared_ptr<security::WorkerAdmission> admission_;
  int terminated_by_ = 0;
  // job_command: the signal forwarded to the launcher (Interrupt), the time by which its Shutdown must have come,
  // and the job's exit code the Shutdown carried.
  int interrupt_sent_ = 0;
  std::chrono::steady_clock::time_point interrupt_deadline_;
  std::optional<int> job_exit_code_;
};

}  // namespace dtrain::agent

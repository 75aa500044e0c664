#pragma once

// The launcher: gets one agent session per node, runs rounds (attempts) of the job on them, reacts to the first
// failure by stopping every group, restarts while the policy allows, and reports the root cause.
//
// One thread runs the job: every input (agent messages, closed sessions, signals, local agent processes) arrives
// on the EventQueue, so the job's state below is touched by that thread alone.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/controller/agent_connection.h"
#include "cli/controller/console.h"
#include "cli/controller/event_queue.h"
#include "cli/controller/join_server.h"
#include "cli/controller/agent_processes.h"
#include "cli/controller/restart_policy.h"
#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

struct ControllerOptions {
  std::string self_exe;             // the dtrain binary (local agents are started from it)
  std::chrono::milliseconds agent_start_timeout{30000};
  bool insecure = false;            // plaintext to agents off loopback (--insecure); warned about at every start
  std::string secret_dir;           // cluster secret for TLS + token ("" = the default directory)
};

// One node's answers to `dtrain doctor JOB.yaml`'s probes.
struct ProbedNode {
  unsigned node_rank = 0;
  std::string hostname;
  std::optional<v1::ProbeResult> checks;   // first probe: node checks, versions, node 0's open port
  std::optional<v1::ProbeResult> reach;    // second probe: TCP reachability of node 0's port and the other agents
  std::optional<double> clock_offset_ms;   // its clock minus the launcher's when the first answer arrived
};

class Controller {
 public:
  Controller(spec::Spec spec, ControllerOptions options);
  ~Controller();

  // Runs the job to its end; returns the launcher's exit code (DESIGN.md: 0, root cause's code, 128+signal, 130).
  int run();

  // `dtrain doctor JOB.yaml`: gets the job's nodes as a launch would, probes every agent (its node checks with the
  // job's log and checkpoint directories, then TCP from every node to node 0's MASTER_PORT range and to the other
  // agents), then lets the agents go. Each probe waits at most `timeout` for the answers. Throws
  // std::runtime_error when the nodes cannot be had.
  std::vector<ProbedNode> probe(const std::string& checkpoint_dir, std::chrono::milliseconds timeout);

  // From the signal thread: the first SIGINT/SIGTERM/SIGHUP stops every worker gracefully, a second one at once.
  void signal(int signal) {
    Event event;
    event.kind = Event::Kind::signal;
    event.signal = signal;
    events_.push(std::move(event));
  }

 private:
  struct Node {
    std::shared_ptr<NodeSession> connection;
    spec::NodeInfo info;
    std::chrono::steady_clock::time_point last_heard;
    bool hello = false;
    bool session_closed = false;
    bool lost = false;            // failed or gone: never part of a round again
    bool group_done = false;      // this round's workers all exited by themselves
    bool group_stopped = false;   // this round's StopGroup completed
    std::optional<unsigned> slot; // ssh/slurm: which host it is (orders node ranks)
  };
  struct Worker {
    bool started = false;
    bool exited = false;
    std::uint32_t pid = 0;
  };
  enum class Outcome { success, worker_failed, node_failed, interrupted };

  void start_nodes();
  void dial_static_agents();
  void start_remote_agents();
  // ssh/slurm: whether an agent the launcher started may still join (its process runs and it has not said hello).
  bool more_may_join() const;
  // ssh/slurm: the node whose hello carried `slot`, or -1.
  int node_of_slot(int slot) const;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_for(const std::string& address);
  std::shared_ptr<grpc::ServerCredentials> server_credentials_for(const std::string& address);
  grpc::ChannelArguments channel_arguments_for(const std::string& address);
  bool uses_tls(const std::string& address) const;
  void load_identity();
  // Picks this round's nodes (alive, said hello, in node order, at most nodes.count MAX), waiting up to
  // nodes.join_timeout_s for at least MIN. False (with node_failure_ set) when too few are left.
  bool select_nodes(bool first_round);
  int alive_nodes() const;
  void configure(int node);
  Outcome run_round(int restart_count);
  void stop_round(std::uint32_t round);
  // A warning naming every log file that could not be written completely (a full disk), if any.
  // `deadline`, or earlier when a signal set the launcher's exit deadline.
  std::chrono::steady_clock::time_point bounded(std::chrono::steady_clock::time_point deadline) const;
  void report_incomplete_logs();
  void shutdown_nodes();

  // Waits for the next event (sending heartbeats and checking node timeouts meanwhile); false at `deadline`.
  bool next_event(Event& event, std::chrono::steady_clock::time_point deadline);
  // Applies an event to the job state (logs, exits, heartbeats, signals, lost sessions).
  void apply(const Event& event);
  void send(int node, const v1::LauncherMessage& message);
  void lose_node(int node, const std::string& why);
  std::string make_job_dir();

  spec::Spec spec_;
  ControllerOptions options_;
  RestartPolicy policy_;
  Console console_;
  EventQueue events_;
  std::string job_id_;
  std::string job_dir_;
  std::unique_ptr<AgentProcesses> agent_processes_;  // local, ssh, slurm: the agent (or ssh/srun) processes
  int remote_slots_ = 0;                             // ssh/slurm: how many agents were asked for
  std::vector<std::string> slot_failures_;           // ssh/slurm: "host: how its ssh/srun ended" before joining
  std::unique_ptr<JoinServer> join_server_;
  std::optional<security::ClusterSecret> secret_;   // loaded on first TLS use
  security::Identity identity_;
  std::vector<Node> nodes_;          // every node that ever connected, by id (static/local: spec order; join: join order)
  std::vector<int> active_;          // this round's nodes by node rank (ids into nodes_)
  std::chrono::milliseconds node_timeout_;
  std::chrono::milliseconds heartbeat_interval_;
  std::chrono::steady_clock::time_point next_heartbeat_;
  bool shutting_down_ = false;
  bool probing_ = false;             // dtrain doctor: report problems instead of failing nodes over them

  // The round in progress.
  std::uint32_t round_ = 0;
  spec::Plan plan_;
  std::map<unsigned, Worker> workers_;
  std::size_t started_workers_ = 0;
  std::chrono::steady_clock::time_point round_started_;
  std::map<unsigned, v1::WorkerHealth> last_health_;   // by rank, this round
  // Log files that could not be written (full disk, ...), by "attempt A rank R"; kept over all rounds, so that a
  // finished job still says that its logs are incomplete.
  std::map<std::string, std::string> incomplete_logs_;
  // Set by the first SIGINT/SIGTERM/SIGHUP: every wait of the shutdown ends by then (stop.grace_s + kExitMargin).
  std::optional<std::chrono::steady_clock::time_point> exit_by_;
  static constexpr std::chrono::milliseconds kExitMargin{600};
  std::optional<v1::RoundPrepared> prepared_;
  std::optional<Failure> root_cause_;
  std::vector<Failure> other_failures_;
  std::optional<std::string> node_failure_;
  std::map<std::pair<int, std::uint32_t>, v1::ProbeResult> probe_results_;   // by (node id, probe id)
  std::map<int, std::uint64_t> probe_received_ms_;                         // launcher clock at the first answer
  int interrupted_by_ = 0;
  int signals_seen_ = 0;
};

}  // namespace dtrain::controller

#pragma once

// The job spec: what a user writes in JOB.yaml (or passes as flags to `dtrain run`), how it is checked, and how
// it becomes a per-rank plan (argv, env, CPU binding, log files) once the nodes are known.
//
//   load_spec_file / load_spec_string   YAML text + `--set` overrides -> Spec, or SpecError with every problem
//   validate                            the semantic checks alone, for a Spec built from flags
//   make_plan                           Spec + the nodes' facts + the round -> one WorkerPlan per rank
//   render_plan                         the plan as `dtrain launch --dry-run` prints it

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <stdexcept>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/node/topology/node_topology.h"

namespace dtrain::spec {

// Where the nodes come from.
enum class Provider {
  local,        // "local": the launcher starts nodes.count agents on this machine (simulated nodes on loopback)
  static_list,  // "static": agents already listening at nodes.agents; the launcher dials them
  ssh,          // "ssh": the launcher starts agents over ssh; they dial back (`dtrain agent --join`)
  slurm,        // "slurm": agents started by srun inside an allocation; they dial back
  join,         // "join": agents started by hand with `dtrain agent --join HOST:PORT` dial the launcher, which
                //   listens on nodes.rendezvous; node ranks follow join order
};

// How workers are pinned to CPUs.
enum class Binding {
  automatic,  // "auto": each worker gets its own block of the host's CPUs (see make_plan)
  none,       // "none": no affinity; OMP_NUM_THREADS is still the worker's share of the CPUs
};

std::string_view to_string(Provider);
std::string_view to_string(Binding);

// ---- limits -----------------------------------------------------------------------------------------------------
// Upper bounds that validate() enforces on every spec, however it was built (YAML, `--set`, `dtrain run` flags).
// They keep each size and duration the launcher computes with inside its types, so a typo (count: 100000,
// grace_s: 1e300) is an error that names the key instead of a crash, an allocation of gigabytes or a value that
// silently wraps. The project's target is 4,096 nodes; each bound leaves room above what real jobs use.
inline constexpr int kMaxNodes = 4096;               // nodes.count, both MIN and MAX
inline constexpr int kMaxWorkersPerNode = 1024;      // workers_per_node, also what gpu/cpu resolves to on a node
inline constexpr long long kMaxWorldSize = 65536;    // nodes x workers_per_node: 4,096 nodes of 16 GPUs. A plan holds
                                                     //   every rank's argv and environment (a few KB each) in memory
inline constexpr int kMaxRestarts = 10000;           // restart.max_restarts
inline constexpr double kMaxDurationS = 7 * 24 * 3600.0;  // every *_s key (grace, backoff, timeouts): 7 days. Longer
                                                     //   is never a useful timeout, and 7 days in milliseconds fits
                                                     //   the 32-bit fields of the session protocol
// Lower bounds where a smaller value fails every job rather than making it stricter:
//   health.node_timeout_s  an agent sends a heartbeat every second until the launcher's Configure reaches it
//       (AgentOptions::default_heartbeat), then every node_timeout_s / 5 but at most every 100 ms (Fleet): 2 s holds
//       two of the first and leaves room for one late. It cannot be 0 (every node would be lost at once).
//   nodes.join_timeout_s  a joining agent's connection attempt waits up to 1 s, and an agent the launcher turned
//       away redials 1 s later (JoinClient); 2 s holds one of each.
inline constexpr double kMinNodeTimeoutS = 2;
inline constexpr double kMinJoinTimeoutS = 2;
inline constexpr std::size_t kMaxNameLength = 128;   // name: the job id (<name>-YYYYmmdd-HHMMSS[-N]) is a directory
                                                     //   name, and file names stop at 255 bytes

// The shortest text that reads back as `value` (2, 0.5, 1e-09): how an error shows a number the user wrote or a bound,
// so that 604800.0000001 is not shown as the limit it exceeds. Inline: cli/run's checks use it without the spec
// library.
inline std::string shortest_number(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

// A validated duration (finite, 0 <= seconds <= kMaxDurationS) in whole milliseconds, rounded up so that a positive
// duration never becomes 0, which means "off" for the keys that allow it. Throws std::out_of_range for anything
// else: a Spec that did not go through validate().
std::chrono::milliseconds duration_ms(double seconds);

struct Spec {
  std::string name;  // the job's name, [a-z0-9-]+, at most kMaxNameLength; required. Prefix of the job id and of
                     //   its log directory.

  struct Nodes {
    Provider provider = Provider::local;  // where agents come from
    int min_count = 1;                    // `count: N` sets min = max = N; `count: MIN:MAX` (static, join, ssh,
    int max_count = 1;                    //   slurm) is elastic: start with >= MIN of MAX nodes. For static and
                                          //   ssh, count defaults to the number of agents / hosts, and MAX must
                                          //   equal it. For slurm, no count (0 here) means every node of the
                                          //   allocation (SLURM_JOB_NUM_NODES when the job starts). At most
                                          //   kMaxNodes
    std::vector<std::string> agents;      // static only: one "host:port" per node, in node-rank order
    std::vector<std::string> hosts;       // ssh only: "[user@]host[:ssh_port]" per node, in node-rank order
    std::string rendezvous;               // "host:port" the launcher listens on for agents that dial in: required
                                          //   for join; for ssh and slurm "" = this host's address towards the
                                          //   nodes (or on nodes.interface) with a free port
    std::vector<std::string> ssh_command{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
                                          // ssh: the client and its options; the launcher appends [-p PORT]
                                          //   [user@]host -- <remote_dtrain> agent --join ...
    std::vector<std::string> srun_command{"srun"};  // slurm: srun and extra options; the launcher appends
                                          //   --nodes N --ntasks N --ntasks-per-node 1 <remote_dtrain> agent ...
    std::string remote_dtrain;            // ssh, slurm: the dtrain binary on the nodes ("" = this launcher's path)
    std::string interface;                // network interface workers talk over ("" = let the agents choose);
                                          //   also becomes NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    double join_timeout_s = 60;           // how long the launcher waits for every node to join,
                                          //   kMinJoinTimeoutS to kMaxDurationS
    std::string topology;                 // local only: a saved `nvidia-smi topo -m` the agents use instead of
                                          //   scanning this host (`dtrain agent --topology`); "" = scan
  } nodes;

  struct WorkersPerNode {
    enum class Kind {
      count,  // exactly `count` workers on every node
      gpu,    // one worker per GPU of the node
      cpu,    // one worker per CPU of the node
    } kind = Kind::count;
    int count = 1;  // used when kind == count; 1 to kMaxWorkersPerNode, and count x nodes <= kMaxWorldSize
  } workers_per_node;

  std::vector<std::string> command;  // argv of every worker; with `shell: true` exactly one string, run by /bin/sh -c.
                                     //   No string of a spec may hold a NUL byte: exec and the environment would
                                     //   cut it there
  bool shell = false;                // run command[0] through /bin/sh -c instead of exec'ing the argv
  std::map<std::string, std::string> env;  // extra worker environment; wins over nccl.env and automatic tuning
  std::map<std::string, std::string> tune_env;  // from `--tune FILE` (cli/tune/overlay.h): DTRAIN_TUNE (the
                                                //   bootstrap's knobs) and the overlay's env knobs; over `env`
  std::string working_dir = ".";           // worker cwd; relative to where the launcher runs (it makes it absolute)

  struct Restart {
    int max_restarts = 0;   // how many times the whole job is restarted after a failure, 0 to kMaxRestarts
    double backoff_s = 1;   // pause before each restart, 0 to kMaxDurationS
  } restart;

  struct Stop {
    double grace_s = 10;  // between SIGTERM and SIGKILL when a group is stopped, 0 to kMaxDurationS
  } stop;

  struct Health {
    double heartbeat_timeout_s = 30;  // a worker whose health reports stop for this long has failed
    double hang_timeout_s = 0;        // a worker whose step counter does not move for this long has failed
    double startup_timeout_s = 600;   // a reporting worker with no first step this long after it started has failed
    double exit_timeout_s = 120;      // a worker whose last report said `exiting` and that has not exited this long
                                      //   after it has failed (stuck in teardown)
    double node_timeout_s = 10;       // an agent that is silent for this long is a failed node; kMinNodeTimeoutS
                                      //   to kMaxDurationS, never 0
                                      // The *_s keys: 0 to kMaxDurationS; 0 turns that check off (hang_timeout_s is
                                      //   off by default).
    double straggler_ratio = 1.2;     // a rank whose own work per step (data wait + compute + optimizer) exceeds the
                                      //   other ranks' median by more than this factor, window after window, is
                                      //   named a straggler (cli/controller/diagnose/diagnosis.h); > 1 and <= 100
    enum class Instrument {
      automatic,  // "auto": a worker whose command runs Python gets the PyTorch bootstrap first on its PYTHONPATH
                  //   (worker/python/bootstrap/sitecustomize.py: optimizer steps, DataLoader waits, blocking
                  //   collectives, reported as dtrain_health does), which arms only if the program imports torch
      off,        // "off": nothing is added; only scripts that use dtrain_health themselves report
    } instrument = Instrument::automatic;
  } health;

  struct Logs {
    std::string dir = "runs";  // per-job logs go to <dir>/<job_id>/attempt_<n>/rank_<r>.log
    enum class Console {
      rank0,  // "rank0": rank 0's stdout and stderr are shown on the launcher's console
      all,    // "all": every rank's
      none,   // "none": nobody's (the files still have everything)
      ranks,  // a YAML list of ranks: those ranks'
    } console = Console::rank0;
    std::vector<int> console_ranks;  // when console == ranks; each >= 0 and < world size
  } logs;

  struct Nccl {
    bool automatic = true;                   // "auto": apply the tuning dtrain chooses (see make_plan)
    std::map<std::string, std::string> env;  // NCCL variables; win over tuning, lose to `env`
  } nccl;

  Binding binding = Binding::automatic;
  bool gpu_isolation = false;  // CUDA_VISIBLE_DEVICES = the worker's own GPU (else unset, and scripts select with
                               //   LOCAL_RANK); needs every node's workers placed by GPU (gpu_placement.h)

  struct Observe {
    std::string metrics_addr;  // "host:port" ([ipv6]:port) where the launcher serves GET /metrics in Prometheus'
                               //   text format while the job runs; port 0 = any free port (printed and written to
                               //   events.jsonl); "" = off. Metrics carry no secrets, but a host that is not
                               //   loopback makes them readable by anyone who can reach it
  } observe;

  std::string source;  // where the spec came from, for messages: the file name, or e.g. "dtrain run"
};

// One problem found in a spec. Rendered by format() as
//   job.yaml:3:5: nodes.cuont: unknown key. Did you mean 'nodes.count'? Allowed keys under nodes: provider, ...
struct Diagnostic {
  std::string file;    // spec file, "--set" for an override, or the Spec's source; "" = none
  int line = 0;        // 1-based; 0 = unknown (then column is 0 too)
  int column = 0;      // 1-based; 0 = unknown
  std::string key;     // dotted path of the offending key ("nodes.count", "nodes.agents[1]", "env.FOO"); may be ""
  std::string message; // what is wrong, one sentence ending in '.'
  std::string hint;    // how to fix it: allowed values, did-you-mean, an example; may be ""

  std::string format() const;  // "file:line:col: key: message hint", leaving out the parts that are unknown
};

// Thrown with every problem found, not just the first, sorted by position.
class SpecError : public std::exception {
 public:
  SpecError() = default;
  explicit SpecError(std::vector<Diagnostic> d) : diagnostics(std::move(d)) {}

  std::vector<Diagnostic> diagnostics;

  const char* what() const noexcept override;  // all diagnostics formatted, one per line

 private:
  mutable std::string what_;
};

// Parse, override and validate. `overrides` are `--set` arguments, "key.path=value", the value parsed as YAML
// (`--set command=[python3,train.py]`, `--set nodes.count=4`, `--set env.FOO=bar`; an empty value is "").
// They are applied to the document before it is checked; intermediate sections are created as needed.
// Throws SpecError: unreadable file, YAML syntax error (with its position), bad override, unknown key, wrong type,
// impossible value, missing required key (name, command).
Spec load_spec_file(const std::string& path, const std::vector<std::string>& overrides);
Spec load_spec_string(std::string_view yaml, std::string_view source, const std::vector<std::string>& overrides);

// The value checks that do not depend on YAML (ranges, names, cross-key rules), for a Spec built in code.
// Diagnostics carry spec.source as their file and no position. Throws SpecError.
void validate(const Spec&);

// How often a worker resends its latest health report when no step completed (DTRAIN_HEALTH_INTERVAL_MS): a fifth
// of health.heartbeat_timeout_s, so that four lost or late heartbeats in a row still do not fail a live worker,
// between 100 ms (more is load on the agent for nothing) and 1 s (the reports are the launcher's only sign of life
// from inside a worker). 1 s when the heartbeat check is off.
std::chrono::milliseconds health_interval(const Spec::Health& health);

// One entry of nodes.hosts: "[user@]host[:ssh_port]".
struct SshHost {
  std::string user;  // "" = ssh's default
  std::string host;
  int port = 0;      // 0 = ssh's default
};
// Parses an entry of nodes.hosts; std::nullopt when it is not of that form (validate says why).
std::optional<SshHost> parse_ssh_host(std::string_view text);

// ---- planning ---------------------------------------------------------------------------------------------------

// Facts one node's agent reported, in node-rank order.
struct NodeInfo {
  std::string hostname;                     // for messages and the plan's `host`
  std::string host_id;                      // same value = same machine (simulated local nodes share it);
                                            //   "" = use hostname
  std::string address;                      // how peers reach this node (MASTER_ADDR when it is node 0)
  std::string agent_address;                // the agent's endpoint for worker health reports (DTRAIN_AGENT_ADDR)
  std::vector<unsigned> cpus;               // CPUs the agent may use (its affinity mask)
  std::vector<int> cpu_numa;                // NUMA node of cpus[i]; shorter than cpus = unknown, taken as 0
  unsigned gpu_count = 0;                   // visible GPUs
  std::uint64_t mem_total_bytes = 0;        // RAM (the agent's MemTotal); 0 = not known
  double cpu_gemm_flops = 0;                // fp32 GEMM FLOP/s `dtrain doctor` cached there (the peak of its CPU
  unsigned cpu_gemm_threads = 0;            //   ranks' MFU; 0 = none), and the threads it ran on
  std::map<std::string, std::string> tuned_env;  // variables the launcher chose for the whole node (the socket
                                                 //   interface); used when nccl.auto, below nccl.env and env
  node::topo::NodeTopology topology;        // per local rank, what `dtrain topo` recommends there (GPU, CPUs, NICs,
                                            //   NCCL variables); empty ranks = no GPU placement
};

// This round of rendezvous (one per attempt).
struct RoundInfo {
  std::string job_id;          // TORCHELASTIC_RUN_ID, DTRAIN_JOB_ID
  unsigned restart_count = 0;  // 0 on the first attempt
  std::string master_addr;     // "" = node 0's address
  unsigned master_port = 0;    // reserved by node 0's agent; 0 = not reserved yet (dry run)
  std::string store_address;   // node 0's key-value store, host:port; "" = not reserved yet
  std::string store_token;     // per-job token guarding the store; "" = not issued yet
  std::string attempt_dir;     // absolute, <logs.dir>/<job_id>/attempt_<n>
};

struct WorkerPlan {
  unsigned rank = 0, local_rank = 0, node_rank = 0;
  std::string host;                          // the node's hostname
  // argv and env are moved into the round's StartGroups when it starts (Round::start_groups).
  std::vector<std::string> argv;             // what the agent execs
  std::map<std::string, std::string> env;    // the complete set dtrain adds to the agent's environment
  unsigned omp_threads = 0;                  // env's OMP_NUM_THREADS (0: not a number), for after env moved
  std::string working_dir;
  std::vector<unsigned> cpus;                // affinity; empty = not pinned
  std::optional<unsigned> gpu;               // the GPU it is placed on (DTRAIN_GPU); unset = not placed by GPU
  std::vector<std::string> nics;             // its GPU's nearest NICs, the one it leaves by first
  std::string log_path;                      // attempt_dir/rank_<r>.log: stdout and stderr, line by line
  std::string error_file;                    // attempt_dir/rank_<r>_error.json (TORCHELASTIC_ERROR_FILE)
  bool stream_stdout = false, stream_stderr = false;  // shown on the launcher's console
};

struct Plan {
  unsigned world_size = 0, nnodes = 0, workers_per_node = 0;
  std::vector<WorkerPlan> workers;    // ordered by rank
  std::vector<std::string> warnings;  // things the user should know (deprecated variables, oversubscription)
};

// A spec that cannot be planned on these nodes; what() is a message for the user.
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Placeholders shown where a value exists only once the job is launched.
inline constexpr std::string_view kReservedAtLaunch = "<reserved at launch>";

// Expects a validated spec (validate / load_spec_*). Throws PlanError.
Plan make_plan(const Spec&, const std::vector<NodeInfo>& nodes, const RoundInfo&);

// Text for `dtrain launch --dry-run`: a header, the warnings, then one block per rank (rank, node, host, local rank,
// cpus, argv, working dir, log, console, and its full env sorted by name). DTRAIN_JOB_TOKEN is shown as "<hidden>"
// when a real token is set.
std::string render_plan(const Spec&, const Plan&);

}  // namespace dtrain::spec

#pragma once

// torchrun's options on `dtrain run` (one node). The options keep torchrun's spellings: dashes or underscores
// (`--nproc-per-node`, `--nproc_per_node`), `--opt=value` or `--opt value`, and the program comes after the options
// without `--` (a script path, or `-m module`, run by Python; `--no-python` runs the program itself). The `-- CMD ARGS`
// form of `dtrain run` runs CMD as it is, as before. An option that is not on the command line takes the value of
// torchrun's environment variable for it, PET_ and its name in capitals with underscores (PET_NPROC_PER_NODE=4),
// when that is set; a flag's (PET_STANDALONE, PET_MODULE, PET_NO_PYTHON, PET_RUN_PATH) must be a whole number, 0 for
// off. The options are one table (option_table.h) that parsing, the environment, --help and resolve() iterate.
//
// What each option does (README "Coming from torchrun" has the same as a table):
//   -n, --nproc-per-node N|cpu|auto|gpu  workers per node. cpu: the number of online CPUs (os.cpu_count()); auto: the
//       number of GPUs when there are any, else the CPUs (torchrun 1.13); gpu: the number of GPUs, refused without.
//       `-n` is dtrain's short spelling of the same option: the two are one option.
//   --nnodes N|MIN:MAX   more than 1: a multi-node job, the same command on every node (cli/run/multi_node.h). The
//       node whose machine owns the rendezvous endpoint's host (or, when node ranks are given, node rank 0) runs
//       the launcher (provider join, nodes.count N or MIN:MAX, listening on the endpoint) and an agent of its own;
//       every other node runs an agent that joins it. Under srun (SLURM_NODEID set) --nnodes defaults to the step's
//       node count, the endpoint to the step's first host (its NodeAddr, port 29400) and the node rank to
//       SLURM_NODEID: `srun dtrain run --nproc-per-node 8 train.py` needs nothing more.
//   --node-rank R        the node's rank (orders node ranks: Hello.slot); without it, join order, the launcher's
//       node first. Needs --nnodes above 1 unless it is 0, and must be below --nnodes (its MAX); the launcher refuses
//       a rank another node has (cli/run/multi_node_checks.h, cli/controller/transport/join_door.h).
//   --rdzv-backend B     c10d or static: the launcher is the rendezvous whichever is named; etcd and etcd-v2 are
//       refused (dtrain uses no etcd server), anything else is refused as unknown.
//   --rdzv-endpoint HOST[:PORT]  one node: must name this machine; PORT (default 29400, torchrun's) must be free, as
//       torchrun's c10d store binds it. Multi-node: where the launcher listens (its node) and the agents dial (the
//       others). Ignored under --standalone, as torchrun ignores it there.
//   --rdzv-id ID         taken; the run is named by dtrain's job id (TORCHELASTIC_RUN_ID = DTRAIN_JOB_ID).
//   --rdzv-conf K=V,...  join_timeout -> nodes.join_timeout_s (how long the launcher waits for its nodes);
//       read_timeout -> health.node_timeout_s (how long a silent agent is waited for before its node is failed);
//       each at least the spec key's bound (cli/spec/spec.h: kMinJoinTimeoutS, kMinNodeTimeoutS);
//       torchrun's other keys (last_call_timeout, close_timeout, timeout, is_host, keep_alive_interval,
//       keep_alive_max_attempt) have no dtrain meaning and are ignored with a note; any other key is refused.
//   --standalone         one node on this machine (what `dtrain run` always is); conflicts with --nnodes above 1.
//   --master-addr HOST   one node: must name this machine. Multi-node without --rdzv-endpoint: the endpoint is
//       --master-addr:--master-port (port default 29500, torchrun's), as torchrun's static rendezvous uses them.
//   --master-port PORT   must be free with the static backend (torchrun binds it); MASTER_PORT itself is the free
//       port dtrain's agent reserves (said once on stderr).
//   --max-restarts R     restart.max_restarts (TORCHELASTIC_MAX_RESTARTS).
//   --monitor-interval S taken; dtrain does not poll its workers (each exit is seen at once), said once on stderr.
//   --start-method spawn|fork|forkserver  taken; every dtrain worker is a new process (fork and exec by its agent), as
//       with spawn. Said once on stderr when not spawn.
//   --role NAME          "default" only: ROLE_NAME is "default" for every dtrain worker.
//   --log-dir DIR        per-rank files laid out as torchrun 1.13 does (DIR/<run id>_<random>/attempt_<n>/
//       <local rank>/stdout.log and stderr.log; error.json for a rank that left one), written when the job ends,
//       besides dtrain's own run directory. Multi-node: each node lays out its own ranks (local ranks 0..N-1 of
//       its first round) under its own DIR.
//       dtrain keeps one log per rank, stdout and stderr together: it goes into stdout.log (--redirects 1 or 3) or
//       stderr.log (--redirects 2); with 3, stderr.log is left empty.
//   --redirects 0-3, --tee 0-3   whose output the console shows: a rank is shown unless both its streams are
//       redirected without --tee. dtrain shows a rank's two streams together. Per-rank maps (0:1,1:2) are refused.
//   --local-ranks-filter L,...   only these local ranks' output on the console (as newer torchrun documents; torch
//       1.13 lacks the option). On --nodes M simulated nodes: these local ranks of every node; multi-node: each node
//       shows these local ranks of its own.
//   --run-path           taken; the script runs under Python as without it.
//   -m, --module         the program is a module: python -m MODULE ARGS.
//   --no-python          the program is run as it is (no Python); conflicts with -m.
// Without --console, --redirects, --tee or --local-ranks-filter the console shows rank 0, dtrain's default; in a
// multi-node job, on the node that runs rank 0.

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dtrain::cli::run {

// The torchrun options as given (strings: checked by resolve(), which names the option on an error).
struct TorchrunArgs {
  std::string nproc_per_node = "1";
  std::string nnodes;
  std::string node_rank;
  std::string rdzv_backend;
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string rdzv_conf;
  bool standalone = false;
  std::string master_addr;
  std::string master_port;
  std::string max_restarts = "0";
  std::string monitor_interval;
  std::string start_method;
  std::string role;
  std::string log_dir;
  std::string redirects;
  std::string tee;
  std::string local_ranks_filter;
  bool run_path = false;
  bool module = false;
  bool no_python = false;
  // The PET_ variables that gave an option its value (apply_torchrun_environment); a refusal of that option says so.
  std::set<std::string> from_environment;
};

// Adds the options to `cmd` in the option group "torchrun options", each with its dash and underscore spellings.
void add_torchrun_options(CLI::App& cmd, TorchrunArgs& args);

// After parsing: each option that is not on `cmd`'s command line takes its PET_ variable's value, when `getenv` has
// one (std::getenv in dtrain run). Returns "" or the refusal (a flag's variable that is not a whole number).
std::string apply_torchrun_environment(const CLI::App& cmd, TorchrunArgs& args,
                                       const std::function<const char*(const char*)>& getenv);

// What resolve() needs to know of this machine. current() reads the real one (host_facts.cpp).
struct HostFacts {
  int cpu_count = 1;
  int gpu_count = 0;
  std::string python = "python3";  // DTRAIN_PYTHON, else python3 (from PATH)
  // "" when HOST names this machine; else why not ("not an address of this machine", "cannot be resolved: ...").
  std::function<std::string(const std::string& host)> local_host;
  // "" when PORT can be bound on HOST; else why not ("in use", ...).
  std::function<std::string(const std::string& host, int port)> port_free;
  // Under srun: SLURM_NODEID ("" when unset), the step's node count (SLURM_STEP_NUM_NODES, "" when unset), and the
  // step's first host (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, expanded by `scontrol show hostnames`, as its
  // NodeAddr; "" when it cannot be had). The host is asked for only in a multi-node run.
  std::string slurm_node_id;
  std::string slurm_step_nodes;
  std::function<std::string()> slurm_first_host;
  static HostFacts current();
};

// The job the options describe, or the refusal.
struct Resolved {
  std::string error;               // "" = fine; else the message (names the option); the command exits 2
  std::vector<std::string> notes;  // said once on stderr ("dtrain run: ...")
  int nproc = 1;
  int max_restarts = 0;
  std::vector<std::string> command;
  enum class Console { unchanged, rank0, all, none, ranks } console = Console::unchanged;
  std::vector<int> console_ranks;  // Console::ranks: global ranks
  std::optional<double> join_timeout_s;
  std::optional<double> node_timeout_s;
  std::vector<int> console_local_ranks;  // Console::ranks: the local ranks (--local-ranks-filter)
  std::string log_dir;  // --log-dir ("" = none)
  int redirects = 0;    // 0-3

  // --nnodes above 1: this node's part in a multi-node job (cli/run/multi_node.h).
  struct MultiNode {
    int min_nodes = 1;
    int max_nodes = 1;
    std::string endpoint;               // HOST:PORT where the launcher listens and every node's agent dials
    bool launcher = false;              // this node runs the launcher (and an agent of its own)
    std::optional<unsigned> node_rank;  // --node-rank, else SLURM_NODEID under srun; else join order
  };
  std::optional<MultiNode> multi;
};

// `program`: what came after the options; `dashdash`: it came after `--` (run as it is). `nodes`: dtrain's --nodes.
// `console_given`: --console was on the command line (it conflicts with --redirects, --tee, --local-ranks-filter).
Resolved resolve(const TorchrunArgs& args, const std::vector<std::string>& program, bool dashdash, int nodes,
                 bool console_given, const HostFacts& host);

// Lays the per-rank logs of a finished job out as torchrun 1.13 does under `log_dir`:
// <log_dir>/<job_id>_<random>/attempt_<n>/<local_rank>/{stdout,stderr}.log, from dtrain's
// <job_dir>/attempt_<n>/rank_<r>.log, where r = first_rank + local rank (a node's ranks: node rank x nproc on).
// Returns "" or what went wrong.
std::string write_torchrun_logs(const std::string& job_dir, const std::string& job_id, const std::string& log_dir,
                                int redirects, int nproc, int first_rank = 0);
// write_torchrun_logs for `r`'s --log-dir, redirects and workers per node, saying on stderr what went wrong (and where
// dtrain's own logs are).
void lay_out_torchrun_logs(const Resolved& r, const std::string& job_dir, const std::string& job_id, int first_rank);

// The job directories under `dir` whose names start with `prefix` (a job's directory is named by its job id): taken
// before and after a launch, they tell which job it ran.
std::set<std::string> job_dirs(const std::string& dir, const std::string& prefix);

}  // namespace dtrain::cli::run

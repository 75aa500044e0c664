// torchrun's options, one row each (option_table.h). The PET_ names are torchrun 1.13's (torch/distributed/run.py:
// each option's environment default is PET_ and its longest spelling in capitals, underscores for dashes).

#include "cli/run/option_table.h"

#include "cli/run/option_values.h"

namespace dtrain::cli::run {
namespace {

using Kind = TorchrunOption::Kind;
using A = TorchrunArgs;

}  // namespace

const std::vector<TorchrunOption>& torchrun_option_table() {
  static const std::vector<TorchrunOption> rows = {
      {"--nnodes", "", true, Kind::value, "PET_NNODES", "",
       "N or MIN:MAX nodes; above 1, run the same command on every node", &A::nnodes, nullptr, resolve_nnodes},
      {"--standalone", "", false, Kind::flag, "PET_STANDALONE", "", "one node on this machine", nullptr,
       &A::standalone, nullptr},
      {"--node-rank", "", true, Kind::value, "PET_NODE_RANK", "",
       "this node's rank (default: SLURM_NODEID under srun, else join order); rank 0 runs the launcher",
       &A::node_rank, nullptr, resolve_node_rank},
      {"--nproc-per-node", "-n", true, Kind::value, "PET_NPROC_PER_NODE", "1",
       "workers per node: N | cpu | auto | gpu (-n is the same option)", &A::nproc_per_node, nullptr,
       resolve_nproc},
      {"--rdzv-backend", "", true, Kind::value, "PET_RDZV_BACKEND", "",
       "c10d | static (dtrain's launcher is the rendezvous)", &A::rdzv_backend, nullptr, resolve_rdzv_backend},
      {"--rdzv-endpoint", "", true, Kind::value, "PET_RDZV_ENDPOINT", "",
       "HOST[:PORT] (port 29400): the node owning HOST runs the launcher, the others join it", &A::rdzv_endpoint,
       nullptr, resolve_rdzv_endpoint},
      {"--rdzv-id", "", true, Kind::value, "PET_RDZV_ID", "", "taken; the run is named by dtrain's job id",
       &A::rdzv_id, nullptr, nullptr},
      {"--rdzv-conf", "", true, Kind::value, "PET_RDZV_CONF", "", "K=V,...: join_timeout, read_timeout",
       &A::rdzv_conf, nullptr, resolve_rdzv_conf},
      {"--master-addr", "", true, Kind::value, "PET_MASTER_ADDR", "",
       "with --master-port (29500): the endpoint when --rdzv-endpoint is not given", &A::master_addr, nullptr,
       resolve_master_addr},
      {"--master-port", "", true, Kind::value, "PET_MASTER_PORT", "",
       "checked free; dtrain's agent reserves MASTER_PORT", &A::master_port, nullptr, resolve_master_port},
      {"--monitor-interval", "", true, Kind::value, "PET_MONITOR_INTERVAL", "", "taken; dtrain does not poll",
       &A::monitor_interval, nullptr, resolve_monitor_interval},
      {"--start-method", "", true, Kind::value, "PET_START_METHOD", "",
       "spawn | fork | forkserver: taken (workers are new processes)", &A::start_method, nullptr,
       resolve_start_method},
      {"--role", "", false, Kind::value, "PET_ROLE", "", "default only", &A::role, nullptr, resolve_role},
      {"--max-restarts", "", true, Kind::value, "PET_MAX_RESTARTS", "0", "restarts after a failure",
       &A::max_restarts, nullptr, resolve_max_restarts},
      {"--redirects", "-r", false, Kind::value, "PET_REDIRECTS", "", "0-3: streams to files only", &A::redirects,
       nullptr, resolve_redirects},
      {"--tee", "-t", false, Kind::value, "PET_TEE", "", "0-3: streams to files and the console", &A::tee, nullptr,
       resolve_tee},
      {"--local-ranks-filter", "", true, Kind::value, "PET_LOCAL_RANKS_FILTER", "",
       "L,...: only these local ranks' output", &A::local_ranks_filter, nullptr, resolve_console},
      {"--log-dir", "", true, Kind::value, "PET_LOG_DIR", "",
       "per-rank files as torchrun lays them out, when the job ends", &A::log_dir, nullptr, resolve_log_dir},
      {"--run-path", "", true, Kind::flag, "PET_RUN_PATH", "", "taken; the script runs under Python", nullptr,
       &A::run_path, nullptr},
      {"--module", "-m", false, Kind::flag, "PET_MODULE", "", "the program is a Python module (python -m MODULE)",
       nullptr, &A::module, nullptr},
      {"--no-python", "", true, Kind::flag, "PET_NO_PYTHON", "", "run the program itself, not under Python", nullptr,
       &A::no_python, nullptr},
  };
  return rows;
}

std::string cli_names(const TorchrunOption& option) {
  std::string names = *option.short_name != '\0' ? std::string(option.short_name) + "," : "";
  return names + (option.underscores ? spellings(option.name) : std::string(option.name));
}

}  // namespace dtrain::cli::run

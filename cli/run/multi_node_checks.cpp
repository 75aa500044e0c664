#include "cli/run/multi_node_checks.h"

#include "cli/spec/spec.h"

namespace dtrain::cli::run {
std::string check_node_rank(unsigned rank, int max_nodes, const std::string& source, const std::string& nnodes) {
  if (max_nodes <= 0 || rank < static_cast<unsigned>(max_nodes)) return "";
  return "dtrain run: " + source + " " + std::to_string(rank) + " is not a node of --nnodes " + nnodes +
         ": node ranks run from 0 to " + std::to_string(max_nodes - 1) + "; give each node its own rank in that "
         "range (or leave --node-rank out: join order)";
}

std::string check_slurm_step_nodes(const std::string& value, const std::optional<long>& parsed) {
  if (parsed && *parsed >= 1 && *parsed <= spec::kMaxNodes) return "";
  return "dtrain run: SLURM_STEP_NUM_NODES is '" + value + "', not a node count from 1 to " +
         std::to_string(spec::kMaxNodes) + "; run under srun as it sets it, or give --nnodes N";
}

std::string check_rdzv_timeout(const std::string& key, const std::string& value, double seconds) {
  const bool join = key == "join_timeout";
  const double least = join ? spec::kMinJoinTimeoutS : spec::kMinNodeTimeoutS;
  const char* spec_key = join ? "nodes.join_timeout_s" : "health.node_timeout_s";
  if (seconds >= least && seconds <= spec::kMaxDurationS) return "";
  const char* why = join ? "time for an agent's connection attempt and one redial"
                         : "the agents' heartbeats must fit in it with room for one late";
  return "dtrain run: --rdzv-conf " + key + " (" + spec_key + ") must be from " + spec::shortest_number(least) +
         " to " + spec::shortest_number(spec::kMaxDurationS) + " seconds (" + why + "), got '" + value + "'";
}

}  // namespace dtrain::cli::run

#pragma once

// The numbers of a multi-node `dtrain run` that are checked on the node that gives them, before it dials anyone:
// a node rank, the step's node count under srun, and the --rdzv-conf timeouts. Each returns "" or the refusal (the
// command exits 2 with it), naming the option or variable, its value, and what is allowed.

#include <optional>
#include <string>

namespace dtrain::cli::run {

// A node rank must be below the most nodes the job can have (`--nnodes` N, or MIN:MAX's MAX): a node that says
// "rank 7" of 2 would otherwise run as some other rank. `source` names where the rank came from ("--node-rank",
// "SLURM_NODEID").
std::string check_node_rank(unsigned rank, int max_nodes, const std::string& source, const std::string& nnodes);

// Under srun, SLURM_STEP_NUM_NODES (`value`, as set) is the job's node count unless --nnodes is given: `parsed` is
// it read as a whole number from 1 to the largest nodes.count, or nothing. Anything else is refused, as SLURM_NODEID
// is, rather than silently making a one-node job.
std::string check_slurm_step_nodes(const std::string& value, const std::optional<long>& parsed);

// --rdzv-conf join_timeout (nodes.join_timeout_s) and read_timeout (health.node_timeout_s): `seconds` must be at
// least the bound the spec keys have (cli/spec/spec.h: kMinJoinTimeoutS, kMinNodeTimeoutS) and at most 7 days.
std::string check_rdzv_timeout(const std::string& key, const std::string& value, double seconds);

}  // namespace dtrain::cli::run

#pragma once

// How the launcher starts agents on other machines (providers ssh and slurm). Either way the agents dial back
// (`dtrain agent --join`), so nothing listens on the nodes before the job, and the session, TLS and lease are those
// of provider join:
//
//   ssh:   <ssh_command> [-p PORT] [-l USER] -- HOST '<remote_dtrain>' agent --join ADDR --slot I ...   (one per host)
//   slurm: <srun_command> --nodes N --ntasks N --ntasks-per-node 1 [--cpus-per-task C] <remote_dtrain> agent
//          --join ADDR --slot slurm ...                                                        (one for all nodes)
//
// The remote agent listens on 0.0.0.0 with a free port and advertises the address it reaches the launcher from;
// --slot tells the launcher which host it is, so node ranks follow nodes.hosts (ssh) or SLURM_NODEID (slurm)
// whatever the order in which agents join. ssh gets the remote command as one string for the remote shell, so
// every word is single-quoted.

#include <string>
#include <string_view>
#include <vector>

#include "cli/spec/spec.h"

namespace dtrain::controller {

struct RemoteAgentOptions {
  std::string dtrain;          // the dtrain binary on the nodes (nodes.remote_dtrain, else the launcher's own path)
  std::string join_address;    // host:port the agents dial (the launcher's join server)
  bool insecure = false;       // pass --insecure (the launcher was started with it)
  std::string secret_dir;      // pass --secret-dir (when the launcher was given one; the same path on every node)
  double join_timeout_s = 60;  // how long an agent keeps trying to reach the launcher
  std::string run_dir;         // pass --run-dir: the job's logs go to <run_dir>/<job id>/ on each node, as the
                               //   launcher's own <logs.dir>/<job id>/ (one place on a shared filesystem)
};

// One argv per entry of nodes.hosts.
std::vector<std::vector<std::string>> ssh_agent_commands(const spec::Spec& spec, const RemoteAgentOptions& options);

// The one srun argv that starts an agent on each of `node_count` nodes.
std::vector<std::string> srun_agent_command(const spec::Spec& spec, int node_count, const RemoteAgentOptions& options);

// The number of nodes a slurm job uses: nodes.count's maximum, else the allocation's (SLURM_JOB_NUM_NODES).
// Throws std::runtime_error when the launcher does not run inside an allocation.
int slurm_node_count(const spec::Spec& spec);

// Where the launcher listens for agents: nodes.rendezvous; else the address of nodes.interface, or the address this
// host reaches the first host from (ssh), or its first non-loopback address (slurm), with port 0 (any free port).
// Throws std::runtime_error when none can be found.
std::string rendezvous_listen_address(const spec::Spec& spec);

}  // namespace dtrain::controller

#pragma once

// `dtrain doctor JOB.yaml`: checks across the nodes of a job, from what each node's agent answered to the probe
// (versions, clock, reachability, interfaces). A pure function of those findings, like the node checks.

#include <optional>
#include <string>
#include <vector>

#include "agent/node/doctor/checks.h"
#include "agent/node/reach.h"

namespace dtrain::node::doctor {

struct NodeFindings {
  std::string node;                      // "node 1 (host-b)"
  bool answered = false;                 // the agent answered the probe in time
  std::string dtrain_version;
  std::string driver_version;            // "" without an NVIDIA driver
  int nccl_version = 0;                  // ncclGetVersion code, 0 = not found
  std::optional<double> clock_offset_ms; // its clock minus the launcher's (bounded by the one-way network delay)
  std::vector<Reach> master_port;        // node 0's MASTER_PORT range, as this node reached it (empty on node 0)
  std::vector<Reach> agents;             // the other nodes' agents
  std::vector<std::string> interfaces;   // interfaces with an IPv4 address
};

struct ClusterOptions {
  std::string interface;                 // nodes.interface ("" = not set)
  double max_clock_skew_ms = 100;        // warn above this spread between the nodes' clocks
};

// cluster.answered, cluster.dtrain_version, cluster.driver_version, cluster.nccl_version, cluster.clock_skew,
// cluster.master_port, cluster.agents, cluster.interface.
std::vector<Check> cluster_checks(const std::vector<NodeFindings>& nodes, const ClusterOptions& options);

// A node's report back from render_json (what agents send). Throws std::runtime_error on malformed text.
NodeReport parse_json(const std::string& text);

// The --json of a whole job: {"nodes":[<node report>...], "cluster":{"checks":[...]}}.
std::string render_job_json(const std::vector<NodeReport>& nodes, const std::vector<Check>& cluster);

}  // namespace dtrain::node::doctor

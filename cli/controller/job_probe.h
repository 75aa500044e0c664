#pragma once

// `dtrain doctor JOB.yaml` through the job's agents: two probes per node of the selected fleet.
//   1. its node checks (with the job's log and checkpoint directories), versions and clock; node 0 also opens a
//      port, as it would for MASTER_PORT;
//   2. TCP from every node to node 0's port and to every other agent.
// Each waits at most `timeout` for the answers; a node that does not answer in time is reported as such.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/controller/fleet/fleet.h"
#include "cli/controller/session/session_messages.h"

namespace dtrain::controller {

// One node's answers.
struct ProbedNode {
  unsigned node_rank = 0;
  std::string hostname;
  std::optional<ProbeResult> checks;       // first probe: node checks, versions, node 0's open port
  std::optional<ProbeResult> reach;        // second probe: TCP reachability of node 0's port and the other agents
  std::optional<double> clock_offset_ms;   // its clock minus the launcher's when the first answer arrived
};

class JobProbe {
 public:
  JobProbe(Fleet& fleet, Interrupts& interrupts, const Timeouts& timeouts)
      : fleet_(fleet), interrupts_(interrupts), timeouts_(timeouts) {}

  // Probes `nodes` (fleet ids by node rank).
  std::vector<ProbedNode> run(const std::vector<int>& nodes, const std::string& log_dir,
                              const std::string& checkpoint_dir, std::chrono::milliseconds timeout);
  // ProbeResults, from the pump.
  void on_report(int node, const AgentReport& report);

 private:
  // Waits until every node answered probe `id` (or is gone), at most `timeout`.
  void collect(std::uint32_t id, std::chrono::milliseconds timeout);
  const ProbeResult* result(int node, std::uint32_t id) const;

  Fleet& fleet_;
  Interrupts& interrupts_;
  const Timeouts& timeouts_;
  std::vector<int> nodes_;
  std::map<std::pair<int, std::uint32_t>, ProbeResult> results_;   // by (node id, probe id)
  std::map<int, std::uint64_t> received_ms_;                        // launcher clock at a node's first answer
};

}  // namespace dtrain::controller

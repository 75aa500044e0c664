#pragma once

// The agent's answer to a Probe (`dtrain doctor JOB.yaml`): this node's doctor checks, the versions the other nodes
// must agree with, its clock, and TCP reachability of the addresses the launcher lists. One Prober per session:
// the port it opens for the probe (node 0's MASTER_PORT range) stays open until the session ends.

#include <memory>

#include "agent/node/reach.h"
#include "dtrain/v1/session.pb.h"

namespace dtrain::agent {

class Prober {
 public:
  // Runs what the probe asks for (node checks, open port, reachability; the latter bounded by its timeout).
  v1::ProbeResult answer(const v1::Probe& probe);

 private:
  std::unique_ptr<node::OpenPort> open_port_;
};

}  // namespace dtrain::agent

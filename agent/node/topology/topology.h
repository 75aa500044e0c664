#pragma once

// Entry points of `dtrain topo`, shared by the CLI and the agent (no gRPC here).

#include <string>

#include "agent/node/topology/report.h"

namespace dtrain::node::topo {

struct TopologyOptions {
  ScanRoots roots;                                 // sysfs and procfs roots (tests: a fake tree)
  std::string nvml_library = "libnvidia-ml.so.1";  // what dlopen loads for GPU facts
};

// Scans this machine (sysfs + NVML) and analyses it. Never throws for a missing GPU or driver: the report says so.
Report live_topology(const TopologyOptions& options = {});

}  // namespace dtrain::node::topo

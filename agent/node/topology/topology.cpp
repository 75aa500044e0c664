#include "agent/node/topology/topology.h"

namespace dtrain::node::topo {

Report live_topology(const TopologyOptions& options) {
  return analyze_live(scan_host(options.roots), read_nvml(options.nvml_library));
}

}  // namespace dtrain::node::topo

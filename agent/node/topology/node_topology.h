#pragma once

// What an agent tells its launcher about its node's topology, in its hello: per local rank, what `dtrain topo`
// recommends (the GPU, the CPUs near it, its nearest NICs and the NCCL variables), and the warnings `dtrain topo`
// prints. The launcher places every rank from this (cli/spec/placement/gpu_placement.h). Plain data: the launcher and the
// job spec include it without linking the topology scan.

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace dtrain::node::topo {

struct Report;

// One local rank as `dtrain topo` places it: local rank i runs on the i-th GPU it lists.
struct RankTopology {
  unsigned gpu = 0;                 // the GPU's index (nvidia-smi and NVML order)
  std::string bus_id;               // its PCI bus id ("0000:18:00.0"); "" when not known (imported)
  std::string cpu_affinity;         // CPUs near it, whole list, in the topology's notation ("48-63,176-191");
                                    //   "" when the topology does not say
  std::string numa;                 // NUMA node(s) near it ("1", "0-1"); "" when not known
  std::vector<std::string> nics;    // its nearest NICs, the one its traffic should leave by first
  std::vector<std::pair<std::string, std::string>> env;  // the NCCL variables `dtrain topo` recommends, in order
};

struct NodeTopology {
  std::string source;                  // "live" (sysfs + NVML) or the imported file
  std::vector<RankTopology> ranks;     // one per GPU, in local-rank order; empty: no GPU known
  std::vector<std::string> warnings;   // what `dtrain topo` warns about, in plain words
};

// The hello's form of a report: every local rank, and the warnings except "no GPU information" (a node without
// GPUs is not worth a warning at every launch).
NodeTopology summarize(const Report& report, const std::string& source);

// The analysis of a saved `nvidia-smi topo -m` (`dtrain topo --import FILE`). An error names the file, and
// FILE:LINE for text the importer cannot read, and says what to save there.
Result<Report> import_topology_file(const std::string& path);
// Its summary (`dtrain agent --topology FILE`, `nodes.topology: FILE`), the same errors.
Result<NodeTopology> load_topology_file(const std::string& path);

}  // namespace dtrain::node::topo

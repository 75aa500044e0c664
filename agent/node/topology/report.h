#pragma once

// What `dtrain topo` tells: the matrix, each GPU's nearest NICs, each local rank's GPU, NIC, CPUs and NCCL
// variables, and warnings in plain words. Built from the live machine or from an imported nvidia-smi output; the
// same analysis runs on both (fields an import cannot know stay empty and print as null).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/node/topology/host_scan.h"
#include "agent/node/topology/matrix.h"
#include "agent/node/topology/nvml.h"

namespace dtrain::node::topo {

struct NicPath {
  std::string name;  // "mlx5_0"
  std::string path;  // the matrix cell between the GPU and it ("PIX")
};

struct GpuEntry {
  unsigned index = 0;
  std::optional<std::string> name, pci;   // unknown on import
  std::string numa = "N/A";               // NUMA Affinity as nvidia-smi prints it ("3", "0-1", "N/A")
  std::string cpu_affinity = "N/A";       // "48-63,176-191"
  std::vector<NicPath> nics;              // nearest usable NICs: all that share the best level
};

struct NicEntry {
  std::string name;
  std::optional<std::string> pci, numa;         // unknown on import
  std::optional<std::vector<RdmaPort>> ports;   // unknown on import
};

struct LocalRank {
  unsigned local_rank = 0;
  unsigned gpu = 0;                       // GPU index
  std::optional<std::string> nic;         // the NIC this rank's traffic should leave by
  std::optional<std::string> cpus;        // CPU list to bind to (its share of the GPU's CPU affinity)
  std::optional<std::string> numa;        // NUMA node to bind memory to
  std::vector<std::pair<std::string, std::string>> env;  // NCCL variables dtrain would set, in order
};

struct Report {
  bool live = false;                      // from this machine (else imported)
  bool gpus_visible = false;              // NVML answered with at least one GPU
  std::string gpu_note;                   // why no GPU is shown, when none is
  Matrix matrix;
  std::vector<GpuEntry> gpus;
  std::vector<NicEntry> nics;
  std::vector<LocalRank> local_ranks;
  std::vector<std::string> warnings;
  // Live only, for the text output.
  std::vector<NumaNode> numa_nodes;
  std::vector<NetInterface> interfaces;
  std::vector<PciDevice> interface_devices;  // the PCI function of each entry of `interfaces` (empty bdf if none)
};

// The analysis of this machine from a scan and NVML facts (pure: tests feed both).
Report analyze_live(const HostScan& scan, const NvmlFacts& nvml);
// The analysis of a saved `nvidia-smi topo -m` output. Throws ImportError.
Report analyze_import(const std::string& text);

// Splits a CPU list into `parts` shares, each range split on its own so hyperthread siblings listed as a second
// range ("0-47,96-143") stay with their cores: share 0 of 4 is "0-11,96-107".
std::string cpu_share(const std::string& cpulist, std::size_t part, std::size_t parts);

// The text `dtrain topo` prints, and the JSON of `dtrain topo --json`.
std::string render_text(const Report& report);
std::string render_json(const Report& report);

}  // namespace dtrain::node::topo

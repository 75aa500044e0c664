#pragma once

// The connection matrix as `nvidia-smi topo -m` prints it: one row and one column per GPU and per NIC, each cell
// a level (X, NV#, PIX, PXB, PHB, NODE, SYS; SOC on old drivers), then per GPU row its CPU Affinity, NUMA
// Affinity and GPU NUMA ID. Cells are kept as the text nvidia-smi prints, so an imported matrix renders back to
// the same cells.

#include <optional>
#include <string>
#include <vector>

#include "agent/node/topology/host_scan.h"
#include "agent/node/topology/nvml.h"

namespace dtrain::node::topo {

struct Matrix {
  std::vector<std::string> gpus;        // row/column labels "GPU0".. (in order)
  std::vector<std::string> nic_labels;  // NIC column labels as printed: "NIC0".. (with a legend) or "mlx5_0"..
  std::vector<std::string> nic_names;   // device name of each NIC column ("mlx5_0")
  bool nic_legend = true;               // NIC columns are NIC# with a "NIC Legend" block
  std::vector<std::vector<std::string>> cells;  // (gpus + nics)^2, row-major, self = "X"
  std::vector<std::string> cpu_affinity;        // per GPU: "0-47,96-143", "N/A"
  std::vector<std::string> numa_affinity;       // per GPU: "0", "0-1", "N/A"
  std::vector<std::string> gpu_numa_id;         // per GPU: "N/A" or a node id
  bool has_numa_affinity = true;                // old drivers print CPU Affinity only
  bool has_gpu_numa_id = true;

  std::size_t size() const { return gpus.size() + nic_labels.size(); }
  std::string label(std::size_t i) const { return i < gpus.size() ? gpus[i] : nic_labels[i - gpus.size()]; }
  const std::string& cell(std::size_t row, std::size_t col) const { return cells[row][col]; }
};

// Builds the live matrix: GPU-GPU cells from NVLink counts (NV#) or NVML's common ancestor, every other cell from
// the PCI tree; the NICs are the RDMA devices of the scan. GPUs absent from NVML are not shown.
Matrix build_matrix(const HostScan& scan, const NvmlFacts& nvml);

// The number of NVLinks between two GPUs of `nvml` (direct links, plus min of both sides' links to NVSwitches).
unsigned nvlink_count(const NvmlFacts& nvml, std::size_t a, std::size_t b);

// Rank of a cell for "nearest": X 0, NV# 1, PIX 2, PXB 3, PHB 4, NODE 5, SYS/SOC 6, anything else 7.
int path_rank(const std::string& cell);

// The matrix lines (header, GPU rows, NIC rows) exactly as nvidia-smi prints them: tab separated, " X " on the
// diagonal, an empty field before GPU NUMA ID. No trailing newline after the last row.
std::string render_matrix(const Matrix& m);
// The Legend block nvidia-smi prints below the matrix, and the NIC Legend block (empty without NIC legend).
std::string render_legend();
std::string render_nic_legend(const Matrix& m);

}  // namespace dtrain::node::topo

#include "agent/node/topology/matrix.h"

#include <algorithm>

#include "agent/node/topology/pci_level.h"
#include "common/os/cpu_list.h"

namespace dtrain::node::topo {
namespace {

unsigned switch_links(const NvmlFacts& nvml, const NvmlGpu& gpu) {
  unsigned n = 0;
  for (const auto& link : gpu.nvlinks) {
    if (!link.active) continue;
    bool to_gpu = std::any_of(nvml.gpus.begin(), nvml.gpus.end(),
                              [&](const NvmlGpu& g) { return !g.pci.empty() && g.pci == link.remote_pci; });
    if (link.remote_type == 2 || (link.remote_type < 0 && !link.remote_pci.empty() && !to_gpu)) ++n;
  }
  return n;
}

}  // namespace

unsigned nvlink_count(const NvmlFacts& nvml, std::size_t a, std::size_t b) {
  const NvmlGpu& ga = nvml.gpus[a];
  const NvmlGpu& gb = nvml.gpus[b];
  unsigned direct = 0;
  for (const auto& link : ga.nvlinks) {
    if (link.active && !gb.pci.empty() && link.remote_pci == gb.pci && link.remote_type != 2) ++direct;
  }
  return direct + std::min(switch_links(nvml, ga), switch_links(nvml, gb));
}

int path_rank(const std::string& cell) {
  if (cell == "X") return 0;
  if (cell.size() > 2 && cell.compare(0, 2, "NV") == 0 &&
      std::all_of(cell.begin() + 2, cell.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 1;
  }
  if (cell == "PIX") return 2;
  if (cell == "PXB") return 3;
  if (cell == "PHB") return 4;
  if (cell == "NODE") return 5;
  if (cell == "SYS" || cell == "SOC") return 6;
  return 7;
}

// The NUMA node(s) of a device as nvidia-smi prints them: the kernel's numa_node, else (a VM or a one-socket box
// where sysfs says -1) the NUMA nodes whose CPUs the device's local CPU list covers, as "0" or "0-1"; "N/A" when
// neither is known.
static std::string numa_affinity_of(const HostScan& scan, const PciDevice* d) {
  if (d == nullptr) return "N/A";
  if (d->numa_node >= 0) return std::to_string(d->numa_node);
  if (d->local_cpulist.empty() || scan.numa.empty()) return "N/A";
  const auto local = parse_cpu_list(d->local_cpulist);
  std::vector<int> nodes;
  for (const auto& numa : scan.numa) {
    const auto cpus = parse_cpu_list(numa.cpulist);
    if (std::any_of(cpus.begin(), cpus.end(), [&](unsigned c) { return std::find(local.begin(), local.end(), c) != local.end(); })) {
      nodes.push_back(numa.id);
    }
  }
  if (nodes.empty()) return "N/A";
  std::string out;
  for (std::size_t i = 0; i < nodes.size();) {
    std::size_t j = i;
    while (j + 1 < nodes.size() && nodes[j + 1] == nodes[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(nodes[i]) + (j > i ? "-" + std::to_string(nodes[j]) : "");
    i = j + 1;
  }
  return out;
}

Matrix build_matrix(const HostScan& scan, const NvmlFacts& nvml) {
  Matrix m;
  std::vector<const PciDevice*> devices;
  for (const auto& gpu : nvml.gpus) {
    m.gpus.push_back("GPU" + std::to_string(gpu.index));
    const PciDevice* d = find_pci(scan, gpu.pci);
    devices.push_back(d);
    m.cpu_affinity.push_back(d && !d->local_cpulist.empty() ? d->local_cpulist : "N/A");
    m.numa_affinity.push_back(numa_affinity_of(scan, d));
    m.gpu_numa_id.push_back(gpu.numa_id ? std::to_string(*gpu.numa_id) : "N/A");
  }
  for (const auto& nic : scan.rdma) {
    const PciDevice* d = find_pci(scan, nic.pci);
    if (d == nullptr) continue;  // software RDMA (rxe, siw): no PCI position, not a NIC column
    m.nic_labels.push_back("NIC" + std::to_string(m.nic_labels.size()));
    m.nic_names.push_back(nic.name);
    devices.push_back(d);
  }
  std::size_t n = m.size(), g = m.gpus.size();
  m.cells.assign(n, std::vector<std::string>(n));
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < n; ++c) {
      std::string& cell = m.cells[r][c];
      if (r == c) {
        cell = "X";
        continue;
      }
      if (r < g && c < g) {
        unsigned links = nvlink_count(nvml, r, c);
        if (links > 0) {
          cell = "NV" + std::to_string(links);
          continue;
        }
        const auto& ancestor = nvml.gpus[r].ancestor;
        if (c < ancestor.size() && !level_name(ancestor[c]).empty()) {
          cell = level_name(ancestor[c]);
          continue;
        }
      }
      cell = devices[r] && devices[c] ? pci_level(*devices[r], *devices[c], scan.numa.size()) : "N/A";
    }
  }
  return m;
}

std::string render_matrix(const Matrix& m) {
  std::string out;
  for (std::size_t i = 0; i < m.size(); ++i) out += "\t" + m.label(i);
  out += "\tCPU Affinity";
  if (m.has_numa_affinity) out += "\tNUMA Affinity";
  if (m.has_gpu_numa_id) out += "\tGPU NUMA ID";
  for (std::size_t r = 0; r < m.size(); ++r) {
    out += "\n" + m.label(r);
    for (std::size_t c = 0; c < m.size(); ++c) out += "\t" + (m.cells[r][c] == "X" ? std::string(" X ") : m.cells[r][c]);
    if (r < m.gpus.size()) {
      out += "\t" + m.cpu_affinity[r];
      if (m.has_numa_affinity) out += "\t" + m.numa_affinity[r];
      if (m.has_gpu_numa_id) out += "\t\t" + m.gpu_numa_id[r];
    }
  }
  return out;
}

std::string render_legend() {
  return "Legend:\n"
         "\n"
         "  X    = Self\n"
         "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
         "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
         "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
         "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
         "  PIX  = Connection traversing at most a single PCIe bridge\n"
         "  NV#  = Connection traversing a bonded set of # NVLinks\n";
}

std::string render_nic_legend(const Matrix& m) {
  if (!m.nic_legend || m.nic_labels.empty()) return {};
  std::string out = "NIC Legend:\n\n";
  for (std::size_t i = 0; i < m.nic_labels.size(); ++i) out += "  " + m.nic_labels[i] + ": " + m.nic_names[i] + "\n";
  return out;
}

}  // namespace dtrain::node::topo

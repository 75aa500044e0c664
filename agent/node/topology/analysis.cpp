// The analysis shared by live and imported topologies: nearest NICs, local-rank recommendations, warnings.

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "agent/node/topology/import.h"
#include "agent/node/topology/report.h"
#include "common/os/cpu_list.h"

namespace dtrain::node::topo {
namespace {

struct Range {
  unsigned lo, hi;
};

std::vector<Range> parse_ranges(const std::string& list) {
  std::vector<Range> out;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      auto dash = part.find('-');
      unsigned lo = static_cast<unsigned>(std::stoul(part.substr(0, dash)));
      unsigned hi = dash == std::string::npos ? lo : static_cast<unsigned>(std::stoul(part.substr(dash + 1)));
      if (hi >= lo) out.push_back({lo, hi});
    } catch (const std::exception&) {
      return {};
    }
  }
  return out;
}

bool port_active(const RdmaPort& p) { return p.state == "ACTIVE"; }

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

// The NICs a rank may leave by: those with an ACTIVE port, or every NIC when none reports one (an import knows no
// port states).
std::vector<std::size_t> usable_nics(const Report& r) {
  std::vector<std::size_t> usable;
  for (std::size_t i = 0; i < r.nics.size(); ++i) {
    const auto& ports = r.nics[i].ports;
    if (ports && std::any_of(ports->begin(), ports->end(), port_active)) usable.push_back(i);
  }
  if (usable.empty()) {
    for (std::size_t i = 0; i < r.nics.size(); ++i) usable.push_back(i);
  }
  return usable;
}

// Each GPU's nearest NICs: every usable NIC at the best level of its matrix row.
void find_nearest_nics(Report& r, const std::vector<std::size_t>& usable) {
  const Matrix& m = r.matrix;
  std::size_t g = m.gpus.size();
  for (std::size_t row = 0; row < g; ++row) {
    int best = 7;
    for (std::size_t nic : usable) best = std::min(best, path_rank(m.cell(row, g + nic)));
    if (best >= 7) continue;
    for (std::size_t nic : usable) {
      if (path_rank(m.cell(row, g + nic)) == best) r.gpus[row].nics.push_back({r.nics[nic].name, m.cell(row, g + nic)});
    }
  }
}

// One local rank per GPU, with its NIC, its share of the GPU's CPUs and its NUMA node.
void assign_local_ranks(Report& r) {
  // Each rank leaves by the least used of its GPU's nearest NICs, so GPUs sharing a NIC pair spread over both.
  std::map<std::string, unsigned> uses;
  std::map<std::string, std::size_t> affinity_users, affinity_seen;
  for (const auto& gpu : r.gpus) ++affinity_users[gpu.cpu_affinity];
  for (std::size_t row = 0; row < r.matrix.gpus.size(); ++row) {
    const GpuEntry& gpu = r.gpus[row];
    LocalRank rank;
    rank.local_rank = static_cast<unsigned>(row);
    rank.gpu = gpu.index;
    const NicPath* chosen = nullptr;
    for (const auto& p : gpu.nics) {
      if (chosen == nullptr || uses[p.name] < uses[chosen->name]) chosen = &p;
    }
    if (chosen) {
      rank.nic = chosen->name;
      ++uses[chosen->name];
    }
    if (gpu.cpu_affinity != "N/A") {
      rank.cpus = cpu_share(gpu.cpu_affinity, affinity_seen[gpu.cpu_affinity]++, affinity_users[gpu.cpu_affinity]);
    }
    if (gpu.numa != "N/A") rank.numa = gpu.numa;
    r.local_ranks.push_back(std::move(rank));
  }
}

// The NCCL variables every local rank gets: the NICs nearest to some GPU, the socket interface, and rails.
void set_nccl_env(Report& r, const std::vector<std::size_t>& usable, const std::string& socket_ifname) {
  std::size_t g = r.matrix.gpus.size();
  std::vector<std::string> hca;
  for (std::size_t nic : usable) {
    bool nearest_to_some = std::any_of(r.gpus.begin(), r.gpus.end(), [&](const GpuEntry& gpu) {
      return std::any_of(gpu.nics.begin(), gpu.nics.end(), [&](const NicPath& p) { return p.name == r.nics[nic].name; });
    });
    if (nearest_to_some) hca.push_back(r.nics[nic].name);
  }
  // Rails: every GPU has its own NIC behind its PCIe switch; keeping each ring on one rail (NCCL_CROSS_NIC=0)
  // avoids crossing rails between nodes.
  std::set<std::string> distinct;
  bool rails = g >= 2;
  for (std::size_t row = 0; row < g; ++row) {
    const auto& rank = r.local_ranks[row];
    if (!rank.nic || r.gpus[row].nics.empty() || path_rank(r.gpus[row].nics.front().path) > 3) rails = false;
    if (rank.nic) distinct.insert(*rank.nic);
  }
  rails = rails && distinct.size() == g;
  for (auto& rank : r.local_ranks) {
    if (!hca.empty()) rank.env.emplace_back("NCCL_IB_HCA", "=" + join(hca, ","));
    if (!socket_ifname.empty()) rank.env.emplace_back("NCCL_SOCKET_IFNAME", "=" + socket_ifname);
    if (rails) rank.env.emplace_back("NCCL_CROSS_NIC", "0");
  }
}

// Warnings the matrix alone shows: GPU pairs across sockets, GPUs far from every NIC.
void warn_about_matrix(Report& r) {
  const Matrix& m = r.matrix;
  std::size_t g = m.gpus.size();
  std::vector<std::string> sys_pairs;
  for (std::size_t a = 0; a < g; ++a) {
    for (std::size_t b = a + 1; b < g; ++b) {
      if (path_rank(m.cell(a, b)) == 6) sys_pairs.push_back(m.gpus[a] + "-" + m.gpus[b]);
    }
  }
  if (!sys_pairs.empty()) {
    r.warnings.push_back("GPU pairs with no NVLink that cross the CPU socket interconnect (SYS): " +
                         join(sys_pairs, ", ") +
                         ". Traffic between them is the slowest on the node; keep tensor-parallel groups within "
                         "one socket.");
  }
  if (!r.nics.empty()) {
    for (std::size_t row = 0; row < g; ++row) {
      if (r.gpus[row].nics.empty() || path_rank(r.gpus[row].nics.front().path) >= 6) {
        r.warnings.push_back(m.gpus[row] + " has no NIC closer than SYS: its traffic to other nodes crosses the "
                             "CPU socket interconnect.");
      }
    }
  }
}

// Nearest NICs, local ranks and the matrix-level warnings; gpus/nics/matrix are filled.
void recommend(Report& r, const std::string& socket_ifname) {
  std::vector<std::size_t> usable = usable_nics(r);
  find_nearest_nics(r, usable);
  assign_local_ranks(r);
  set_nccl_env(r, usable, socket_ifname);
  warn_about_matrix(r);
}

std::string default_interface(const HostScan& scan) {
  for (const auto& n : scan.net) {
    if (n.default_route) return n.name;
  }
  for (const auto& n : scan.net) {
    if (n.operstate == "up" && !n.pci.empty()) return n.name;
  }
  return {};
}

void width_warning(std::vector<std::string>& warnings, const std::string& what, const std::string& bdf,
                   std::optional<unsigned> width, std::optional<unsigned> max_width) {
  if (width && max_width && *width < *max_width) {
    warnings.push_back(what + " (" + bdf + ") PCIe link runs at x" + std::to_string(*width) + " of x" +
                       std::to_string(*max_width) +
                       ": reseat the card or check the slot/riser; its bandwidth is cut accordingly.");
  }
}

// nvmlGpuP2PStatus_t in words.
std::string p2p_status_text(int status) {
  switch (status) {
    case 1: return "chipset not supported";
    case 2: return "GPU not supported";
    case 3: return "IOH topology not supported";
    case 4: return "disabled by registry key";
    case 5: return "not supported";
    default: return "P2P status " + std::to_string(status);
  }
}

// The GPU and NIC entries of a live report, from NVML and the scan; the matrix is filled.
void add_live_entries(Report& r, const HostScan& scan, const NvmlFacts& nvml) {
  for (std::size_t i = 0; i < nvml.gpus.size(); ++i) {
    GpuEntry gpu;
    gpu.index = nvml.gpus[i].index;
    gpu.name = nvml.gpus[i].name;
    gpu.pci = nvml.gpus[i].pci;
    gpu.cpu_affinity = r.matrix.cpu_affinity[i];
    gpu.numa = r.matrix.numa_affinity[i];
    r.gpus.push_back(std::move(gpu));
  }
  for (const auto& name : r.matrix.nic_names) {
    auto it = std::find_if(scan.rdma.begin(), scan.rdma.end(), [&](const RdmaNic& n) { return n.name == name; });
    NicEntry nic{name, it->pci, std::nullopt, it->ports};
    const PciDevice* d = find_pci(scan, it->pci);
    nic.numa = d && d->numa_node >= 0 ? std::to_string(d->numa_node) : "N/A";
    r.nics.push_back(std::move(nic));
  }
}

// PCIe links narrower than they can be: sysfs's widths where it has them, NVML's otherwise; then the NICs'.
void warn_about_pcie_widths(Report& r, const HostScan& scan, const NvmlFacts& nvml) {
  for (std::size_t i = 0; i < nvml.gpus.size(); ++i) {
    const NvmlGpu& gpu = nvml.gpus[i];
    const PciDevice* d = find_pci(scan, gpu.pci);
    if (d && d->link_width && d->max_link_width) {
      width_warning(r.warnings, r.matrix.gpus[i], d->bdf, d->link_width, d->max_link_width);
    } else {
      width_warning(r.warnings, r.matrix.gpus[i], gpu.pci, gpu.pcie_width, gpu.pcie_max_width);
    }
  }
  for (const auto& nic : r.nics) {
    if (const PciDevice* d = find_pci(scan, nic.pci.value_or(""))) {
      width_warning(r.warnings, nic.name, d->bdf, d->link_width, d->max_link_width);
    }
  }
}

// NICs on more than one fabric, and ports that are not ACTIVE.
void warn_about_nic_ports(Report& r) {
  std::map<std::string, std::vector<std::string>> layers;
  for (const auto& nic : r.nics) {
    for (const auto& port : *nic.ports) {
      auto& names = layers[port.link_layer.empty() ? "unknown" : port.link_layer];
      if (std::find(names.begin(), names.end(), nic.name) == names.end()) names.push_back(nic.name);
    }
  }
  if (layers.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [layer, names] : layers) parts.push_back(layer + ": " + join(names, ","));
    r.warnings.push_back("NICs mix link layers (" + join(parts, "; ") +
                         "): NCCL needs every rank on one fabric; list only the NICs of one fabric in NCCL_IB_HCA.");
  }
  for (const auto& nic : r.nics) {
    for (const auto& port : *nic.ports) {
      if (!port_active(port)) {
        r.warnings.push_back(nic.name + " port " + std::to_string(port.port) + " is " +
                             (port.state.empty() ? "in an unknown state" : port.state) +
                             (port.phys_state.empty() ? "" : " (physical: " + port.phys_state + ")") +
                             ", not ACTIVE: NCCL cannot use it; check the cable and the subnet manager (ibstat).");
      }
    }
  }
}

// GPU pairs NVML says cannot read each other's memory.
void warn_about_p2p(Report& r, const NvmlFacts& nvml) {
  for (std::size_t a = 0; a < nvml.gpus.size(); ++a) {
    for (std::size_t b = a + 1; b < nvml.gpus.size(); ++b) {
      int status = b < nvml.gpus[a].p2p_read.size() ? nvml.gpus[a].p2p_read[b] : -1;
      if (status > 0) {
        r.warnings.push_back(r.matrix.gpus[a] + " and " + r.matrix.gpus[b] +
                             " cannot read each other's memory directly (" + p2p_status_text(status) +
                             "): NCCL copies through host memory between them.");
      }
    }
  }
}

}  // namespace

std::string cpu_share(const std::string& cpulist, std::size_t part, std::size_t parts) {
  std::vector<Range> ranges = parse_ranges(cpulist);
  if (parts <= 1 || ranges.empty()) return cpulist;
  std::vector<std::vector<unsigned>> shares(parts);
  for (const auto& range : ranges) {
    std::size_t len = range.hi - range.lo + 1;
    for (std::size_t k = 0; k < parts; ++k) {
      for (std::size_t i = k * len / parts; i < (k + 1) * len / parts; ++i) shares[k].push_back(range.lo + static_cast<unsigned>(i));
    }
  }
  if (std::any_of(shares.begin(), shares.end(), [](const auto& s) { return s.empty(); })) {
    // Many short ranges (interleaved numbering): split the whole list into contiguous shares instead.
    std::vector<unsigned> all;
    for (const auto& range : ranges) {
      for (unsigned c = range.lo; c <= range.hi; ++c) all.push_back(c);
    }
    std::vector<unsigned> mine;
    for (std::size_t i = part * all.size() / parts; i < (part + 1) * all.size() / parts; ++i) mine.push_back(all[i]);
    return mine.empty() ? cpulist : format_cpu_list(mine);
  }
  return format_cpu_list(shares[part]);
}

Report analyze_import(const std::string& text) {
  Report r;
  r.matrix = parse_nvidia_smi_topo(text);
  r.gpus_visible = !r.matrix.gpus.empty();
  for (std::size_t i = 0; i < r.matrix.gpus.size(); ++i) {
    GpuEntry gpu;
    try {
      gpu.index = static_cast<unsigned>(std::stoul(r.matrix.gpus[i].substr(3)));
    } catch (const std::exception&) {
      gpu.index = static_cast<unsigned>(i);
    }
    gpu.cpu_affinity = r.matrix.cpu_affinity[i];
    gpu.numa = r.matrix.numa_affinity[i];
    r.gpus.push_back(std::move(gpu));
  }
  for (const auto& name : r.matrix.nic_names) r.nics.push_back({name, std::nullopt, std::nullopt, std::nullopt});
  recommend(r, "");
  return r;
}

Report analyze_live(const HostScan& scan, const NvmlFacts& nvml) {
  Report r;
  r.live = true;
  r.matrix = build_matrix(scan, nvml);
  r.gpus_visible = !nvml.gpus.empty();
  if (!nvml.loaded) {
    r.gpu_note = "No GPU information: " + nvml.error + ".";
  } else if (nvml.gpus.empty()) {
    r.gpu_note = "NVML reports no GPU on this node" + (nvml.error.empty() ? std::string(".") : ": " + nvml.error + ".");
  }
  if (!r.gpu_note.empty()) r.warnings.push_back(r.gpu_note + " Showing CPUs, NUMA nodes and NICs only.");
  add_live_entries(r, scan, nvml);
  recommend(r, default_interface(scan));
  warn_about_pcie_widths(r, scan, nvml);
  warn_about_nic_ports(r);
  warn_about_p2p(r, nvml);
  r.numa_nodes = scan.numa;
  r.interfaces = scan.net;
  for (const auto& n : scan.net) {
    const PciDevice* d = find_pci(scan, n.pci);
    r.interface_devices.push_back(d ? *d : PciDevice{});
  }
  return r;
}

}  // namespace dtrain::node::topo

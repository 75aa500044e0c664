// Text and JSON forms of a topology report.

#include <nlohmann/json.hpp>

#include "agent/node/topology/report.h"

namespace dtrain::node::topo {
namespace {

using Json = nlohmann::ordered_json;

Json optional_string(const std::optional<std::string>& s) { return s ? Json(*s) : Json(nullptr); }

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string render_text(const Report& r) {
  std::string out;
  if (!r.gpu_note.empty()) out += r.gpu_note + " Showing CPUs, NUMA nodes and NICs only.\n\n";
  if (r.matrix.size() > 0) {
    out += render_matrix(r.matrix) + "\n\n" + render_legend();
    std::string nic_legend = render_nic_legend(r.matrix);
    if (!nic_legend.empty()) out += "\n" + nic_legend;
    out += "\n";
  }
  if (r.live) {
    out += "NUMA nodes:\n";
    if (r.numa_nodes.empty()) out += "  (sysfs lists none)\n";
    for (const auto& node : r.numa_nodes) out += "  node " + std::to_string(node.id) + ": CPUs " + node.cpulist + "\n";
    out += "\nNetwork interfaces:\n";
    for (std::size_t i = 0; i < r.interfaces.size(); ++i) {
      const auto& n = r.interfaces[i];
      const auto& d = r.interface_devices[i];
      out += "  " + pad(n.name, 16) + pad(n.operstate.empty() ? "?" : n.operstate, 8) +
             pad(n.pci.empty() ? "virtual" : n.pci, 14) +
             "NUMA " + (d.bdf.empty() || d.numa_node < 0 ? std::string("N/A") : std::to_string(d.numa_node)) +
             (n.default_route ? "  (default route)" : "") + "\n";
    }
    out += "\nRDMA NICs:\n";
    if (r.nics.empty()) out += "  none (/sys/class/infiniband is empty): NCCL will use TCP sockets between nodes\n";
    for (const auto& nic : r.nics) {
      out += "  " + pad(nic.name, 10) + pad(nic.pci.value_or("?"), 14) + "NUMA " + nic.numa.value_or("N/A") + "\n";
      for (const auto& p : nic.ports.value_or(std::vector<RdmaPort>{})) {
        out += "    port " + std::to_string(p.port) + ": " + p.state + " (" + p.phys_state + "), " + p.rate + ", " +
               p.link_layer + "\n";
      }
    }
    out += "\n";
  }
  if (!r.local_ranks.empty()) {
    out += "Per local rank:\n";
    out += "  " + pad("RANK", 6) + pad("GPU", 6) + pad("NIC (path)", 22) + pad("CPUS", 24) + "NUMA\n";
    for (const auto& rank : r.local_ranks) {
      std::string nic = "none";
      if (rank.nic) {
        nic = *rank.nic;
        for (const auto& p : r.gpus[rank.local_rank].nics) {
          if (p.name == *rank.nic) nic += " (" + p.path + ")";
        }
      }
      out += "  " + pad(std::to_string(rank.local_rank), 6) + pad("GPU" + std::to_string(rank.gpu), 6) + pad(nic, 22) +
             pad(rank.cpus.value_or("-"), 24) + rank.numa.value_or("-") + "\n";
    }
    out += "\nNearest NICs per GPU:\n";
    for (const auto& gpu : r.gpus) {
      std::string list;
      for (const auto& p : gpu.nics) list += (list.empty() ? "" : ", ") + p.name + " (" + p.path + ")";
      out += "  GPU" + std::to_string(gpu.index) + ": " + (list.empty() ? "none" : list) + "\n";
    }
    out += "\nNCCL variables dtrain would set:\n";
    bool same = true;
    for (const auto& rank : r.local_ranks) same = same && rank.env == r.local_ranks.front().env;
    for (const auto& rank : r.local_ranks) {
      if (same && rank.local_rank > 0) break;
      std::string line = same ? "  every local rank:" : "  local rank " + std::to_string(rank.local_rank) + ":";
      for (const auto& [key, value] : rank.env) line += " " + key + "=" + value;
      if (rank.env.empty()) line += " (none: NCCL's defaults fit)";
      out += line + "\n";
    }
    out += "\n";
  }
  out += "Warnings:\n";
  if (r.warnings.size() == (r.gpu_note.empty() ? 0u : 1u)) out += "  none\n";
  for (const auto& w : r.warnings) {
    if (r.gpu_note.empty() || w.rfind(r.gpu_note, 0) != 0) out += "  - " + w + "\n";  // already said on top
  }
  return out;
}

std::string render_json(const Report& r) {
  Json gpus = Json::array();
  for (const auto& gpu : r.gpus) {
    Json nics = Json::array();
    for (const auto& p : gpu.nics) nics.push_back({{"name", p.name}, {"path", p.path}});
    gpus.push_back({{"index", gpu.index},
                    {"name", optional_string(gpu.name)},
                    {"pci", optional_string(gpu.pci)},
                    {"numa", gpu.numa},
                    {"cpu_affinity", gpu.cpu_affinity},
                    {"nics", nics}});
  }
  Json nics = Json::array();
  for (const auto& nic : r.nics) {
    Json ports = nullptr;
    if (nic.ports) {
      ports = Json::array();
      for (const auto& p : *nic.ports) {
        ports.push_back({{"port", p.port},
                         {"state", p.state},
                         {"phys_state", p.phys_state},
                         {"rate", p.rate},
                         {"link_layer", p.link_layer}});
      }
    }
    nics.push_back({{"name", nic.name}, {"pci", optional_string(nic.pci)}, {"numa", optional_string(nic.numa)}, {"ports", ports}});
  }
  Json matrix = Json::object();
  for (std::size_t row = 0; row < r.matrix.size(); ++row) {
    Json cells = Json::object();
    for (std::size_t col = 0; col < r.matrix.size(); ++col) {
      if (row != col) cells[r.matrix.label(col)] = r.matrix.cell(row, col);
    }
    matrix[r.matrix.label(row)] = cells;
  }
  Json ranks = Json::array();
  for (const auto& rank : r.local_ranks) {
    Json env = Json::object();
    for (const auto& [key, value] : rank.env) env[key] = value;
    ranks.push_back({{"local_rank", rank.local_rank},
                     {"gpu", rank.gpu},
                     {"nic", optional_string(rank.nic)},
                     {"cpus", optional_string(rank.cpus)},
                     {"numa", optional_string(rank.numa)},
                     {"env", env}});
  }
  Json out = {{"gpus", gpus}, {"nics", nics}, {"matrix", matrix}, {"local_ranks", ranks}, {"warnings", r.warnings}};
  // Text from files, devices and the network is not always UTF-8; JSON must be, so bad bytes become U+FFFD
  // instead of an exception.
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace dtrain::node::topo

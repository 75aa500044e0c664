#include "agent/node/topology/pci_level.h"

#include <vector>

namespace dtrain::node::topo {
namespace {

// The switches above a device, nearest first (each the function two sysfs levels above the previous one).
std::vector<std::string> switches_above(const PciDevice& d) {
  std::vector<std::string> out;
  for (long i = static_cast<long>(d.chain.size()) - 1 - 2; i >= 0; i -= 2) out.push_back(d.chain[i]);
  return out;
}

int numa_or_default(int numa, std::size_t numa_nodes) { return numa < 0 && numa_nodes <= 1 ? 0 : numa; }

}  // namespace

std::string pci_level(const PciDevice& a, const PciDevice& b, std::size_t numa_nodes) {
  if (a.bdf == b.bdf) return "X";
  if (a.chain.size() >= 2 && b.chain.size() >= 2 && a.host_bridge == b.host_bridge &&
      std::vector<std::string>(a.chain.begin(), a.chain.end() - 1) ==
          std::vector<std::string>(b.chain.begin(), b.chain.end() - 1)) {
    return "PIX";
  }
  if (a.host_bridge == b.host_bridge && !a.host_bridge.empty()) {
    std::vector<std::string> sa = switches_above(a), sb = switches_above(b);
    for (std::size_t i = 0; i < sa.size(); ++i) {
      for (std::size_t j = 0; j < sb.size(); ++j) {
        if (sa[i] == sb[j]) return i + j == 0 ? "PIX" : "PXB";
      }
    }
    return "PHB";
  }
  int na = numa_or_default(a.numa_node, numa_nodes), nb = numa_or_default(b.numa_node, numa_nodes);
  if (na >= 0 && na == nb) return "NODE";
  return "SYS";
}

}  // namespace dtrain::node::topo

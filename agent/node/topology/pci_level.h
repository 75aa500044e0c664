#pragma once

// The connection level between two PCI functions, in nvidia-smi's words: PIX, PXB, PHB, NODE, SYS.
//
// A PCIe switch shows in sysfs as two levels (upstream port, then one downstream port per slot), so, like NCCL's
// topology code, the switch above a device is the function two levels up its sysfs path; walking on by two levels
// gives the next switch, until the root bus. Two devices are then:
//   PIX   behind the same bridge (same parent, or one switch in common that is the first above each of them)
//   PXB   in the same switch tree, crossing more than one switch
//   PHB   on the same root bus (host bridge) with no switch in common
//   NODE  on different host bridges of the same NUMA node
//   SYS   on different NUMA nodes (or a NUMA node the platform does not report, on a multi-node machine)

#include <string>

#include "agent/node/topology/host_scan.h"

namespace dtrain::node::topo {

// `numa_nodes`: how many NUMA nodes the machine has (a device with numa_node -1 on a one-node machine is on it).
std::string pci_level(const PciDevice& a, const PciDevice& b, std::size_t numa_nodes);

}  // namespace dtrain::node::topo

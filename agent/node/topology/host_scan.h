#pragma once

// What the kernel tells about the machine's PCI tree, RDMA NICs, network interfaces and NUMA nodes, read from sysfs.
// Every root is a parameter so tests build a fake tree in a temporary directory and point the scan at it.

#include <optional>
#include <string>
#include <vector>

namespace dtrain::node::topo {

// A PCI function under <sysfs>/bus/pci/devices.
struct PciDevice {
  std::string bdf;                      // "0000:18:00.0" (lower-case, as sysfs names it)
  unsigned pci_class = 0;               // 24-bit class code (0x030200 = 3D controller)
  unsigned vendor = 0;                  // 0x10de NVIDIA, 0x15b3 Mellanox
  int numa_node = -1;                   // -1 where the platform does not say
  std::string local_cpulist;            // "0-47,96-143"
  std::string host_bridge;              // the path component naming the root bus above it ("pci0000:00")
  std::vector<std::string> chain;       // BDFs from the root port down to this device (last = bdf)
  std::optional<unsigned> link_width, max_link_width;  // lanes; absent where sysfs has no such file
  std::string link_speed, max_link_speed;              // "16.0 GT/s PCIe"
};

// One port of an RDMA device (/sys/class/infiniband/<dev>/ports/<n>).
struct RdmaPort {
  unsigned port = 1;
  std::string state;       // "ACTIVE" (the text after "4: ")
  std::string phys_state;  // "LinkUp"
  std::string rate;        // "400 Gb/sec (4X NDR)"
  std::string link_layer;  // "InfiniBand" or "Ethernet" (RoCE)
};

// An RDMA NIC as NCCL sees it (an entry of /sys/class/infiniband).
struct RdmaNic {
  std::string name;                   // "mlx5_0": what NCCL_IB_HCA names
  std::string pci;                    // its PCI function ("" when not on PCI)
  std::vector<RdmaPort> ports;
  std::vector<std::string> netdevs;   // network interfaces of the same PCI function ("ibp24s0", "eth2")
};

// A network interface of /sys/class/net.
struct NetInterface {
  std::string name;
  std::string pci;        // nearest PCI function above it ("" for virtual interfaces)
  std::string operstate;  // "up", "down", "unknown"
  bool default_route = false;  // carries the IPv4 default route (/proc/net/route)
};

struct NumaNode {
  int id = 0;
  std::string cpulist;  // "0-47,96-143"
};

struct HostScan {
  std::vector<PciDevice> pci;            // every PCI function, sorted by BDF
  std::vector<RdmaNic> rdma;             // sorted by name, numbers compared as numbers (mlx5_2 < mlx5_10)
  std::vector<NetInterface> net;         // sorted by name
  std::vector<NumaNode> numa;            // sorted by id
  std::string online_cpus;               // <sysfs>/devices/system/cpu/online
};

struct ScanRoots {
  std::string sysfs = "/sys";
  std::string procfs = "/proc";
};

HostScan scan_host(const ScanRoots& roots = {});

// The device with this BDF, or nullptr.
const PciDevice* find_pci(const HostScan& scan, const std::string& bdf);

// True for NVIDIA display/3D controllers (the GPUs) and for NVSwitches (NVIDIA bridge class 0x0680).
bool is_nvidia_gpu(const PciDevice& d);
bool is_nvswitch(const PciDevice& d);

// Normalises a bus id as NVML prints it ("00000000:18:00.0") to the sysfs form ("0000:18:00.0").
std::string normalize_bdf(const std::string& bus_id);

// "mlx5_2" < "mlx5_10": digit runs compare as numbers.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace dtrain::node::topo

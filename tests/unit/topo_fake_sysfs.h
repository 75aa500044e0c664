#pragma once

// A fake sysfs/procfs tree in a temporary directory, shaped like the kernel's: PCI functions nested under their
// root bus and bridges, /sys/bus/pci/devices symlinks, /sys/class/infiniband and /sys/class/net entries pointing
// into the device tree, NUMA nodes, /proc/net/route.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace dtrain::testing {

class FakeSysfs {
 public:
  FakeSysfs() {
    char pattern[] = "/tmp/dtrain-fake-sysfs-XXXXXX";
    root_ = mkdtemp(pattern);
    std::filesystem::create_directories(sys() / "bus/pci/devices");
    std::filesystem::create_directories(proc() / "net");
    write(proc() / "net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n");
  }
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  std::filesystem::path sys() const { return root_ / "sys"; }
  std::filesystem::path proc() const { return root_ / "proc"; }

  struct Pci {
    std::string host_bridge;          // "pci0000:15"
    std::vector<std::string> chain;   // BDFs from the root port down to the device
    unsigned pci_class = 0x060400;    // bridge unless said
    unsigned vendor = 0x8086;
    int numa = -1;
    std::string cpulist = "0-191";
    int width = 0, max_width = 0;     // 0 = no such file
  };

  // Creates the device (and any bridge above it not yet made, as a plain bridge) and its bus/pci/devices link.
  std::filesystem::path pci(const Pci& p) {
    std::filesystem::path dir = sys() / "devices" / p.host_bridge;
    for (std::size_t i = 0; i < p.chain.size(); ++i) {
      dir /= p.chain[i];
      bool last = i + 1 == p.chain.size();
      if (!last && std::filesystem::exists(dir)) continue;
      std::filesystem::create_directories(dir);
      Pci d = p;
      if (!last) d = Pci{p.host_bridge, {}, 0x060400, 0x8086, p.numa, p.cpulist, 0, 0};
      write(dir / "class", hex(d.pci_class, 6));
      write(dir / "vendor", hex(d.vendor, 4));
      write(dir / "numa_node", std::to_string(d.numa));
      write(dir / "local_cpulist", d.cpulist);
      if (d.width) write(dir / "current_link_width", std::to_string(d.width));
      if (d.max_width) write(dir / "max_link_width", std::to_string(d.max_width));
      std::filesystem::path link = sys() / "bus/pci/devices" / p.chain[i];
      if (!std::filesystem::exists(link)) std::filesystem::create_directory_symlink(dir, link);
    }
    return dir;
  }

  void numa(int id, const std::string& cpulist) {
    auto dir = sys() / ("devices/system/node/node" + std::to_string(id));
    std::filesystem::create_directories(dir);
    write(dir / "cpulist", cpulist);
  }

  struct Port {
    std::string state = "4: ACTIVE";
    std::string phys_state = "5: LinkUp";
    std::string rate = "400 Gb/sec (4X NDR)";
    std::string link_layer = "InfiniBand";
  };

  // An RDMA device on the PCI function `bdf` (created before), the way mlx5 registers it.
  void rdma(const std::string& name, const std::string& bdf, const std::vector<Port>& ports) {
    auto device = std::filesystem::canonical(sys() / "bus/pci/devices" / bdf);
    auto dir = device / "infiniband" / name;
    for (std::size_t i = 0; i < ports.size(); ++i) {
      auto port = dir / "ports" / std::to_string(i + 1);
      std::filesystem::create_directories(port);
      write(port / "state", ports[i].state);
      write(port / "phys_state", ports[i].phys_state);
      write(port / "rate", ports[i].rate);
      write(port / "link_layer", ports[i].link_layer);
    }
    std::filesystem::create_directory_symlink(device, dir / "device");
    std::filesystem::create_directories(sys() / "class/infiniband");
    std::filesystem::create_directory_symlink(dir, sys() / "class/infiniband" / name);
  }

  // A network interface on PCI function `bdf` ("" = virtual); `default_route` adds it to /proc/net/route.
  void net(const std::string& name, const std::string& bdf, bool default_route = false) {
    std::filesystem::path dir = bdf.empty() ? sys() / "devices/virtual/net" / name
                                            : std::filesystem::canonical(sys() / "bus/pci/devices" / bdf) / "net" / name;
    std::filesystem::create_directories(dir);
    write(dir / "operstate", "up");
    std::filesystem::create_directories(sys() / "class/net");
    std::filesystem::create_directory_symlink(dir, sys() / "class/net" / name);
    if (default_route) {
      std::ofstream(proc() / "net/route", std::ios::app)
          << name << "\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
    }
  }

  static void write(const std::filesystem::path& path, const std::string& text) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  }

 private:
  static std::string hex(unsigned v, int digits) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%0*x", digits, v);
    return text;
  }
  std::filesystem::path root_;
};

}  // namespace dtrain::testing

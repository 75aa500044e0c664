// `dtrain topo` on live machines: fake sysfs trees plus fake NVML values, checked cell by cell against what
// nvidia-smi prints for such machines; and the real scan of this machine (no GPU here).

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/node/topology/import.h"
#include "agent/node/topology/topology.h"
#include "tests/unit/topo_fake_sysfs.h"

using namespace dtrain::node::topo;
using dtrain::testing::FakeSysfs;
using Env = std::vector<std::pair<std::string, std::string>>;

namespace {

std::string bdf(unsigned bus, unsigned dev = 0, unsigned fn = 0) {
  char text[16];
  std::snprintf(text, sizeof text, "0000:%02x:%02x.%u", bus, dev, fn);
  return text;
}

std::string live_fixture(const std::string& name) {
  std::ifstream in(std::string(DTRAIN_TOPO_FIXTURES) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// An HGX H100 box as in the fixture: per GPU one root bus with a PCIe switch holding the GPU and its NIC, four on
// each socket, all GPUs on NVSwitches with 18 links each, and a front-end Ethernet port carrying the default route.
struct HgxBox {
  FakeSysfs fs;
  NvmlFacts nvml;
  std::vector<std::string> gpu_bdf, nic_bdf;

  explicit HgxBox(const std::vector<FakeSysfs::Port>& nic_ports = {FakeSysfs::Port{}}) {
    const unsigned roots[8] = {0x15, 0x26, 0x37, 0x48, 0x97, 0xa8, 0xb9, 0xca};
    const char* cpus[2] = {"0-47,96-143", "48-95,144-191"};
    fs.numa(0, cpus[0]);
    fs.numa(1, cpus[1]);
    for (unsigned s = 0; s < 4; ++s) {
      fs.pci({"pci0000:00", {bdf(0, 1 + s), bdf(1 + s)}, 0x068000, 0x10de, 0, cpus[0], 0, 0});
    }
    fs.pci({"pci0000:00", {bdf(0, 0x1c), bdf(0x0a)}, 0x020000, 0x14e4, 0, cpus[0], 0, 0});
    fs.net("eth0", bdf(0x0a), true);
    fs.net("lo", "");
    nvml.loaded = true;
    nvml.driver_version = "570.133.20";
    nvml.cuda_driver_version = 12080;
    for (unsigned i = 0; i < 8; ++i) {
      unsigned b = roots[i];
      int numa = static_cast<int>(i / 4);
      std::string rp = bdf(b, 1), us = bdf(b + 1), ds_gpu = bdf(b + 2, 0), ds_nic = bdf(b + 2, 1);
      gpu_bdf.push_back(bdf(b + 3));
      nic_bdf.push_back(bdf(b + 4));
      char hb[16];
      std::snprintf(hb, sizeof hb, "pci0000:%02x", b);
      fs.pci({hb, {rp, us, ds_gpu, gpu_bdf[i]}, 0x030200, 0x10de, numa, cpus[numa], 16, 16});
      fs.pci({hb, {rp, us, ds_nic, nic_bdf[i]}, 0x020700, 0x15b3, numa, cpus[numa], 16, 16});
      fs.rdma("mlx5_" + std::to_string(i), nic_bdf[i], {i == 3 ? nic_ports.front() : FakeSysfs::Port{}});
      fs.net("ibp" + std::to_string(b + 4) + "s0", nic_bdf[i]);

      NvmlGpu gpu;
      gpu.index = i;
      gpu.name = "NVIDIA H100 80GB HBM3";
      gpu.pci = gpu_bdf[i];
      for (unsigned l = 0; l < 18; ++l) gpu.nvlinks.push_back({l, true, bdf(1 + l % 4), 2});
      nvml.gpus.push_back(gpu);
    }
    for (auto& gpu : nvml.gpus) {
      gpu.ancestor.assign(8, 50);
      gpu.p2p_read.assign(8, 0);
    }
  }
  HostScan scan() const { return scan_host({fs.sys().string(), fs.proc().string()}); }
};

}  // namespace

TEST_CASE("8-GPU NVSwitch box: the live matrix equals nvidia-smi's, cell by cell") {
  HgxBox box;
  Matrix live = build_matrix(box.scan(), box.nvml);
  Matrix reference = parse_nvidia_smi_topo(live_fixture("hgx_h100_8gpu_8nic.txt"));
  REQUIRE(live.size() == reference.size());
  CHECK(live.gpus == reference.gpus);
  CHECK(live.nic_labels == reference.nic_labels);
  CHECK(live.nic_names == reference.nic_names);
  for (std::size_t r = 0; r < live.size(); ++r) {
    for (std::size_t c = 0; c < live.size(); ++c) {
      INFO(live.label(r) << " x " << live.label(c));
      CHECK(live.cell(r, c) == reference.cell(r, c));
    }
  }
  CHECK(live.cpu_affinity == reference.cpu_affinity);
  CHECK(live.numa_affinity == reference.numa_affinity);
  CHECK(live.gpu_numa_id == reference.gpu_numa_id);
  CHECK(render_matrix(live) == render_matrix(reference));
}

TEST_CASE("8-GPU NVSwitch box: recommendations rank by rank") {
  HgxBox box;
  Report r = analyze_live(box.scan(), box.nvml);
  CHECK(r.gpus_visible);
  CHECK(r.warnings.empty());
  REQUIRE(r.local_ranks.size() == 8);
  for (unsigned i = 0; i < 8; ++i) {
    INFO("rank " << i);
    CHECK(r.gpus[i].pci == box.gpu_bdf[i]);
    CHECK(r.gpus[i].name == "NVIDIA H100 80GB HBM3");
    REQUIRE(r.gpus[i].nics.size() == 1);
    CHECK(r.gpus[i].nics[0].name == "mlx5_" + std::to_string(i));
    CHECK(r.local_ranks[i].nic == "mlx5_" + std::to_string(i));
    CHECK(r.local_ranks[i].numa == (i < 4 ? "0" : "1"));
    CHECK(r.local_ranks[i].env == Env{{"NCCL_IB_HCA", "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"},
                                      {"NCCL_SOCKET_IFNAME", "=eth0"},
                                      {"NCCL_CROSS_NIC", "0"}});
    CHECK(r.nics[i].pci == box.nic_bdf[i]);
    CHECK(r.nics[i].numa == (i < 4 ? "0" : "1"));
  }
  CHECK(r.local_ranks[2].cpus == "24-35,120-131");
  CHECK(r.local_ranks[5].cpus == "60-71,156-167");

  auto json = nlohmann::json::parse(render_json(r));
  CHECK(json["gpus"][0]["pci"] == box.gpu_bdf[0]);
  CHECK(json["nics"][0]["ports"][0]["state"] == "ACTIVE");
  CHECK(json["nics"][0]["ports"][0]["link_layer"] == "InfiniBand");
  CHECK(json["nics"][0]["ports"][0]["rate"] == "400 Gb/sec (4X NDR)");
  CHECK(json["matrix"]["GPU7"]["NIC7"] == "PIX");
  std::string text = render_text(r);
  CHECK(text.find("NUMA nodes:\n  node 0: CPUs 0-47,96-143\n  node 1: CPUs 48-95,144-191\n") != std::string::npos);
  CHECK(text.find("NCCL_SOCKET_IFNAME==eth0") != std::string::npos);
  CHECK(text.find("NIC Legend:\n\n  NIC0: mlx5_0\n") != std::string::npos);
}

TEST_CASE("8-GPU box with a NIC port down and an NVLink down") {
  FakeSysfs::Port down{"1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand"};
  HgxBox box({down});
  box.nvml.gpus[2].nvlinks[5].active = false;
  Report r = analyze_live(box.scan(), box.nvml);
  CHECK(r.matrix.cell(2, 0) == "NV17");
  CHECK(r.matrix.cell(0, 2) == "NV17");
  CHECK(r.matrix.cell(0, 1) == "NV18");
  // GPU3's own NIC is down: its nearest usable NICs are the other three of its socket (NODE), least used first.
  REQUIRE(r.gpus[3].nics.size() == 3);
  CHECK(r.gpus[3].nics[0].path == "NODE");
  CHECK(r.local_ranks[3].nic == "mlx5_0");
  CHECK(r.local_ranks[3].env == Env{{"NCCL_IB_HCA", "=mlx5_0,mlx5_1,mlx5_2,mlx5_4,mlx5_5,mlx5_6,mlx5_7"},
                                    {"NCCL_SOCKET_IFNAME", "=eth0"}});
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].find("mlx5_3 port 1 is DOWN (physical: Disabled), not ACTIVE") == 0);
}

// A 4-GPU PCIe box on two sockets: GPU0, GPU1 and an InfiniBand NIC behind one PCIe switch on socket 0, a RoCE NIC
// on another root bus of socket 0, GPU2 and GPU3 on two root ports of one root bus of socket 1 (GPU3 at x8).
struct PcieBox {
  FakeSysfs fs;
  NvmlFacts nvml;
  PcieBox() {
    fs.numa(0, "0-15");
    fs.numa(1, "16-31");
    fs.pci({"pci0000:00", {bdf(0, 1), bdf(1), bdf(2, 8), bdf(3)}, 0x030000, 0x10de, 0, "0-15", 16, 16});
    fs.pci({"pci0000:00", {bdf(0, 1), bdf(1), bdf(2, 0x10), bdf(4)}, 0x030000, 0x10de, 0, "0-15", 16, 16});
    fs.pci({"pci0000:00", {bdf(0, 1), bdf(1), bdf(2, 0x18), bdf(5)}, 0x020700, 0x15b3, 0, "0-15", 16, 16});
    fs.pci({"pci0000:20", {bdf(0x20, 1), bdf(0x21)}, 0x020000, 0x15b3, 0, "0-15", 16, 16});
    fs.pci({"pci0000:80", {bdf(0x80, 1), bdf(0x81)}, 0x030000, 0x10de, 1, "16-31", 16, 16});
    fs.pci({"pci0000:80", {bdf(0x80, 2), bdf(0x82)}, 0x030000, 0x10de, 1, "16-31", 8, 16});
    fs.pci({"pci0000:00", {bdf(0, 0x1c), bdf(6)}, 0x020000, 0x8086, 0, "0-15", 1, 1});
    fs.rdma("mlx5_0", bdf(5), {FakeSysfs::Port{"4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}});
    fs.rdma("mlx5_1", bdf(0x21), {FakeSysfs::Port{"4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)", "Ethernet"}});
    fs.net("eth0", bdf(6), true);
    fs.net("eth2", bdf(0x21));
    nvml.loaded = true;
    const unsigned bus[4] = {3, 4, 0x81, 0x82};
    for (unsigned i = 0; i < 4; ++i) {
      NvmlGpu gpu;
      gpu.index = i;
      gpu.name = "NVIDIA L40S";
      gpu.pci = bdf(bus[i]);
      gpu.nvlinks = {};
      nvml.gpus.push_back(gpu);
    }
    auto level = [](unsigned a, unsigned b) { return (a < 2) == (b < 2) ? (a < 2 ? 10 : 30) : 50; };
    for (unsigned a = 0; a < 4; ++a) {
      nvml.gpus[a].ancestor.assign(4, -1);
      nvml.gpus[a].p2p_read.assign(4, 0);
      for (unsigned b = 0; b < 4; ++b) {
        if (a != b) nvml.gpus[a].ancestor[b] = level(a, b);
      }
    }
    nvml.gpus[2].p2p_read[3] = nvml.gpus[3].p2p_read[2] = 5;
  }
  HostScan scan() const { return scan_host({fs.sys().string(), fs.proc().string()}); }
};

const std::vector<std::vector<std::string>> kPcieBoxCells = {
    {"X", "PIX", "SYS", "SYS", "PIX", "NODE"},  {"PIX", "X", "SYS", "SYS", "PIX", "NODE"},
    {"SYS", "SYS", "X", "PHB", "SYS", "SYS"},   {"SYS", "SYS", "PHB", "X", "SYS", "SYS"},
    {"PIX", "PIX", "SYS", "SYS", "X", "NODE"},  {"NODE", "NODE", "SYS", "SYS", "NODE", "X"},
};

TEST_CASE("4-GPU PCIe box: matrix cell by cell, from NVML levels and from the PCI tree alone") {
  PcieBox box;
  Matrix m = build_matrix(box.scan(), box.nvml);
  CHECK(m.cells == kPcieBoxCells);
  CHECK(m.nic_names == std::vector<std::string>{"mlx5_0", "mlx5_1"});
  CHECK(m.cpu_affinity == std::vector<std::string>{"0-15", "0-15", "16-31", "16-31"});
  CHECK(m.numa_affinity == std::vector<std::string>{"0", "0", "1", "1"});
  for (auto& gpu : box.nvml.gpus) gpu.ancestor.assign(4, -1);
  CHECK(build_matrix(box.scan(), box.nvml).cells == kPcieBoxCells);
}

TEST_CASE("4-GPU PCIe box: recommendations and every warning") {
  PcieBox box;
  Report r = analyze_live(box.scan(), box.nvml);
  REQUIRE(r.local_ranks.size() == 4);
  CHECK(r.gpus[0].nics.size() == 1);
  CHECK(r.gpus[0].nics[0].name == "mlx5_0");
  CHECK(r.gpus[2].nics.size() == 2);
  CHECK(r.local_ranks[0].nic == "mlx5_0");
  CHECK(r.local_ranks[1].nic == "mlx5_0");
  CHECK(r.local_ranks[2].nic == "mlx5_1");
  CHECK(r.local_ranks[3].nic == "mlx5_1");
  CHECK(r.local_ranks[0].cpus == "0-7");
  CHECK(r.local_ranks[1].cpus == "8-15");
  CHECK(r.local_ranks[2].cpus == "16-23");
  CHECK(r.local_ranks[3].cpus == "24-31");
  CHECK(r.local_ranks[3].numa == "1");
  CHECK(r.local_ranks[0].env == Env{{"NCCL_IB_HCA", "=mlx5_0,mlx5_1"}, {"NCCL_SOCKET_IFNAME", "=eth0"}});
  REQUIRE(r.warnings.size() == 6);
  CHECK(r.warnings[0].find("(SYS): GPU0-GPU2, GPU0-GPU3, GPU1-GPU2, GPU1-GPU3.") != std::string::npos);
  CHECK(r.warnings[1].find("GPU2 has no NIC closer than SYS") == 0);
  CHECK(r.warnings[2].find("GPU3 has no NIC closer than SYS") == 0);
  CHECK(r.warnings[3].find("GPU3 (0000:82:00.0) PCIe link runs at x8 of x16") == 0);
  CHECK(r.warnings[4].find("NICs mix link layers (Ethernet: mlx5_1; InfiniBand: mlx5_0)") == 0);
  CHECK(r.warnings[5].find("GPU2 and GPU3 cannot read each other's memory directly") == 0);
  auto json = nlohmann::json::parse(render_json(r));
  CHECK(json["warnings"].size() == 6);
  CHECK(json["nics"][1]["ports"][0]["link_layer"] == "Ethernet");
}

TEST_CASE("no NVML: the report says so and still shows NUMA nodes, interfaces and NICs") {
  PcieBox box;
  NvmlFacts none;
  none.error = "libnvidia-ml.so.1 not found (no NVIDIA driver on this node)";
  Report r = analyze_live(box.scan(), none);
  CHECK(!r.gpus_visible);
  CHECK(r.gpus.empty());
  CHECK(r.local_ranks.empty());
  CHECK(r.matrix.nic_names.size() == 2);
  CHECK(r.matrix.cell(0, 1) == "NODE");
  REQUIRE(!r.warnings.empty());
  CHECK(r.warnings[0].find("No GPU information: libnvidia-ml.so.1 not found") == 0);
  std::string text = render_text(r);
  CHECK(text.find("No GPU information") == 0);
  CHECK(text.find("node 1: CPUs 16-31") != std::string::npos);
  CHECK(text.find("eth0") != std::string::npos);
  CHECK(text.find("mlx5_1") != std::string::npos);
  CHECK(nlohmann::json::parse(render_json(r))["nics"].size() == 2);
}

TEST_CASE("this machine (no GPU, no NVML): scan runs, says so, lists CPUs and interfaces, JSON parses") {
  Report r = live_topology({});
  if (r.gpus_visible) {
    MESSAGE("this machine has GPUs: the no-GPU expectations do not apply");
    return;
  }
  CHECK(!r.gpu_note.empty());
  CHECK(!r.numa_nodes.empty());
  CHECK(!r.interfaces.empty());
  std::string text = render_text(r);
  CHECK(text.find("NUMA nodes:") != std::string::npos);
  CHECK(text.find("Network interfaces:") != std::string::npos);
  auto json = nlohmann::json::parse(render_json(r));
  CHECK(json["gpus"].empty());
  CHECK(!json["warnings"].empty());
}

TEST_CASE("a GPU whose numa_node is -1 (VMs, one-socket boxes) gets the NUMA nodes its CPU list covers") {
  PcieBox box;
  HostScan scan = box.scan();
  for (auto& d : scan.pci) d.numa_node = -1;
  CHECK(build_matrix(scan, box.nvml).numa_affinity == std::vector<std::string>{"0", "0", "1", "1"});
  for (auto& d : scan.pci) {
    if (!d.local_cpulist.empty()) d.local_cpulist = "0-31";
  }
  CHECK(build_matrix(scan, box.nvml).numa_affinity == std::vector<std::string>{"0-1", "0-1", "0-1", "0-1"});
  scan.numa.clear();  // no NUMA information at all
  CHECK(build_matrix(scan, box.nvml).numa_affinity == std::vector<std::string>{"N/A", "N/A", "N/A", "N/A"});
}

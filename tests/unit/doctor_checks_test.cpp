// Every doctor check against fake inputs: pass, warn, fail (and skip where it applies); the report's exit code.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "agent/node/doctor/checks.h"

using namespace dtrain::node;
using doctor::Check;
using doctor::DoctorInputs;
using doctor::Status;

namespace {

constexpr std::uint64_t kGiB = 1024ull * 1024 * 1024;

// A healthy 8-GPU NVSwitch node with 8 InfiniBand NICs.
DoctorInputs healthy() {
  DoctorInputs in;
  in.node = "gpu-node-7";
  in.nvml.loaded = true;
  in.nvml.driver_version = "570.133.20";
  in.nvml.cuda_driver_version = 12080;
  for (unsigned i = 0; i < 8; ++i) {
    topo::NvmlGpu g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.pci = "0000:" + std::to_string(10 + i) + ":00.0";
    for (unsigned l = 0; l < 18; ++l) g.nvlinks.push_back({l, true, "0000:05:00.0", 2});
    g.persistence_mode = true;
    g.ecc_uncorrected_volatile = 0;
    g.ecc_uncorrected_aggregate = 0;
    g.remapped_rows_uncorrectable = 0;
    g.remap_pending = false;
    g.remap_failed = false;
    g.clock_event_reasons = topo::kClockGpuIdle;
    g.compute_processes = std::vector<topo::GpuProcess>{};
    g.pcie_width = g.pcie_max_width = 16;
    g.pcie_gen = 1;
    g.pcie_max_gen = 5;
    g.fabric_state = 3;
    g.fabric_status = 0;
    in.nvml.gpus.push_back(g);
    in.nvidia_pci_gpus.push_back(g.pci);
    in.host.rdma.push_back({"mlx5_" + std::to_string(i), "0000:2" + std::to_string(i) + ":00.0",
                            {{1, "ACTIVE", "LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"}}, {}});
  }
  topo::PciDevice nvswitch;
  nvswitch.bdf = "0000:05:00.0";
  nvswitch.vendor = 0x10de;
  nvswitch.pci_class = 0x068000;
  in.host.pci.push_back(nvswitch);
  in.host.net.push_back({"eth0", "0000:06:00.0", "up", true});
  in.host.net.push_back({"lo", "", "unknown", false});
  in.gdr_modules = {"nvidia_peermem"};
  in.fabric_manager_running = true;
  in.nccl = {true, "/usr/lib/x86_64-linux-gnu/libnccl.so.2", 22803, ""};
  in.memlock = doctor::Rlimit{};
  in.nofile = doctor::Rlimit{1048576, 1048576};
  in.shm_total_bytes = 64 * kGiB;
  in.disks = {{"logs", "/data/runs", "/data/runs", 500 * kGiB, 1000 * kGiB, ""},
              {"checkpoints", "/ckpt", "/ckpt", 5000 * kGiB, 10000 * kGiB, ""}};
  in.cpu_gemm.measured = true;
  in.cpu_gemm.rate = CpuGemmRate{2.5e12, 112, "Intel(R) Xeon(R) Platinum 8480+", 512, 1718000000000};
  in.cpu_gemm.cache_path = "/home/u/.local/state/dtrain/cpu_gemm.json";
  return in;
}

Check find(const doctor::NodeReport& r, const std::string& id) {
  for (const auto& c : r.checks) {
    if (c.id == id) return c;
  }
  FAIL("no check " << id);
  return {};
}

Check run(const DoctorInputs& in, const std::string& id) { return find(doctor::run_node_checks(in), id); }

}  // namespace

TEST_CASE("a healthy GPU node passes every check, exit 0") {
  auto report = doctor::run_node_checks(healthy());
  for (const auto& c : report.checks) {
    INFO(c.id << ": " << c.message);
    CHECK(c.status == Status::pass);
    CHECK(!c.message.empty());
  }
  CHECK(report.checks.size() == 21);
  CHECK(report.exit_code() == 0);
  CHECK(find(report, "gpu.visible").message == "8 GPU(s): 8 x NVIDIA H100 80GB HBM3");
  CHECK(find(report, "gpu.driver").message == "driver 570.133.20, CUDA 12.8");
  CHECK(find(report, "nccl.library").message == "NCCL 2.28.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2)");
}

TEST_CASE("no GPU, no NVML: GPU checks skip with the reason, nothing fails") {
  DoctorInputs in = healthy();
  in.nvml = {};
  in.nvml.error = "libnvidia-ml.so.1 not found (no NVIDIA driver on this node)";
  in.nvidia_pci_gpus.clear();
  in.host.pci.clear();
  in.nccl = {false, "", 0, "libnccl.so.2: cannot open shared object file"};
  auto report = doctor::run_node_checks(in);
  for (const char* id : {"gpu.visible", "gpu.busy", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.memory_rows",
                         "gpu.clocks", "gpu.pcie", "gpu.nvlink", "gpu.fabric_manager", "nccl.library", "gdr.module"}) {
    INFO(id);
    CHECK(find(report, id).status == Status::skip);
  }
  CHECK(find(report, "gpu.visible").message.find("libnvidia-ml.so.1 not found") != std::string::npos);
  CHECK(report.exit_code() == 0);
}

TEST_CASE("gpu.visible fails when PCI has GPUs NVML cannot use") {
  DoctorInputs in = healthy();
  in.nvml = {};
  in.nvml.error = "NVML could not start: Driver Not Loaded";
  Check c = run(in, "gpu.visible");
  CHECK(c.status == Status::fail);
  CHECK(c.message.find("8 NVIDIA GPU(s) on PCI") == 0);
  in = healthy();
  in.nvidia_pci_gpus.push_back("0000:99:00.0");
  c = run(in, "gpu.visible");
  CHECK(c.status == Status::fail);
  CHECK(c.message.find("PCI lists 9 NVIDIA GPUs but NVML only 8") == 0);
  CHECK(doctor::run_node_checks(in).exit_code() == 1);
}

TEST_CASE("gpu.busy, gpu.driver, gpu.persistence") {
  DoctorInputs in = healthy();
  in.nvml.gpus[3].compute_processes = std::vector<topo::GpuProcess>{{4242, 2 * kGiB}};
  Check c = run(in, "gpu.busy");
  CHECK(c.status == Status::warn);
  CHECK(c.message == "busy with other processes: GPU3: pid 4242 (2.0 GiB)");
  for (auto& g : in.nvml.gpus) g.compute_processes.reset();
  CHECK(run(in, "gpu.busy").status == Status::skip);

  in = healthy();
  in.nvml.cuda_driver_version = 11080;
  c = run(in, "gpu.driver");
  CHECK(c.status == Status::warn);
  CHECK(c.message.find("supports CUDA up to 11.8") != std::string::npos);

  in = healthy();
  in.nvml.gpus[0].persistence_mode = false;
  c = run(in, "gpu.persistence");
  CHECK(c.status == Status::warn);
  CHECK(c.fix.find("nvidia-smi -pm 1") != std::string::npos);
}

TEST_CASE("gpu.ecc and gpu.memory_rows: pass, warn, fail") {
  DoctorInputs in = healthy();
  in.nvml.gpus[5].ecc_uncorrected_aggregate = 3;
  CHECK(run(in, "gpu.ecc").status == Status::warn);
  in.nvml.gpus[5].ecc_uncorrected_volatile = 1;
  Check c = run(in, "gpu.ecc");
  CHECK(c.status == Status::fail);
  CHECK(c.message.find("GPU5: 1") != std::string::npos);
  for (auto& g : in.nvml.gpus) g.ecc_uncorrected_volatile = g.ecc_uncorrected_aggregate = std::nullopt;
  CHECK(run(in, "gpu.ecc").status == Status::skip);

  in = healthy();
  in.nvml.gpus[1].remapped_rows_uncorrectable = 2;
  c = run(in, "gpu.memory_rows");
  CHECK(c.status == Status::pass);
  CHECK(c.message.find("GPU1: 2 rows remapped") != std::string::npos);
  in.nvml.gpus[1].remap_pending = true;
  CHECK(run(in, "gpu.memory_rows").status == Status::warn);
  in.nvml.gpus[1].remap_failed = true;
  CHECK(run(in, "gpu.memory_rows").status == Status::fail);

  in = healthy();  // pre-A100 GPUs report page retirement instead
  for (auto& g : in.nvml.gpus) {
    g.remap_pending.reset();
    g.remap_failed.reset();
    g.remapped_rows_uncorrectable.reset();
    g.retired_pages = 0;
    g.retired_pages_pending = false;
  }
  CHECK(run(in, "gpu.memory_rows").status == Status::pass);
  in.nvml.gpus[0].retired_pages_pending = true;
  CHECK(run(in, "gpu.memory_rows").status == Status::warn);
}

TEST_CASE("gpu.clocks, gpu.pcie, gpu.nvlink") {
  DoctorInputs in = healthy();
  in.nvml.gpus[2].clock_event_reasons = topo::kClockHwThermal | topo::kClockSwPowerCap;
  Check c = run(in, "gpu.clocks");
  CHECK(c.status == Status::warn);
  CHECK(c.message == "clocks held down: GPU2: hardware thermal slowdown");
  in = healthy();
  in.nvml.gpus[2].clock_event_reasons = topo::kClockSwPowerCap;
  CHECK(run(in, "gpu.clocks").status == Status::pass);

  in = healthy();
  in.nvml.gpus[6].pcie_width = 8;
  c = run(in, "gpu.pcie");
  CHECK(c.status == Status::warn);
  CHECK(c.message.find("GPU6: x8 of x16") != std::string::npos);

  in = healthy();
  in.nvml.gpus[4].nvlinks[7].active = false;
  c = run(in, "gpu.nvlink");
  CHECK(c.status == Status::fail);
  CHECK(c.message == "GPU4: link 7 down (17 of 18 active)");
  in = healthy();
  for (auto& l : in.nvml.gpus[4].nvlinks) l.active = false;
  CHECK(run(in, "gpu.nvlink").status == Status::warn);
  DoctorInputs single = in;
  single.nvml.gpus.erase(single.nvml.gpus.begin(), single.nvml.gpus.begin() + 4);
  single.nvml.gpus.resize(1);  // one GPU (a VM slice of a bigger box): its links have no peer
  CHECK(run(single, "gpu.nvlink").status == Status::skip);
  for (auto& g : in.nvml.gpus) g.nvlinks.clear();
  in.host.pci.clear();
  CHECK(run(in, "gpu.nvlink").status == Status::skip);
  CHECK(run(in, "gpu.fabric_manager").status == Status::skip);
}

TEST_CASE("gpu.fabric_manager: NVML fabric state first, the daemon otherwise") {
  DoctorInputs in = healthy();
  in.nvml.gpus[0].fabric_state = 2;
  Check c = run(in, "gpu.fabric_manager");
  CHECK(c.status == Status::fail);
  CHECK(c.message.find("GPU0: in progress") != std::string::npos);
  in = healthy();
  in.nvml.gpus[3].fabric_status = 14;
  CHECK(run(in, "gpu.fabric_manager").status == Status::fail);
  in = healthy();
  for (auto& g : in.nvml.gpus) g.fabric_state = 0;  // not reported by this driver
  CHECK(run(in, "gpu.fabric_manager").status == Status::pass);
  in.fabric_manager_running = false;
  c = run(in, "gpu.fabric_manager");
  CHECK(c.status == Status::fail);
  CHECK(c.fix.find("nvidia-fabricmanager") != std::string::npos);
}

TEST_CASE("nccl.library, ib.ports, ib.link_layer, gdr.module") {
  DoctorInputs in = healthy();
  in.nccl = {false, "", 0, "libnccl.so.2: cannot open shared object file"};
  CHECK(run(in, "nccl.library").status == Status::fail);

  in = healthy();
  in.host.rdma[2].ports[0].state = "DOWN";
  in.host.rdma[2].ports[0].phys_state = "Polling";
  Check c = run(in, "ib.ports");
  CHECK(c.status == Status::warn);
  CHECK(c.message == "7 port(s) ACTIVE, not ACTIVE: mlx5_2:1 DOWN/Polling");
  for (auto& nic : in.host.rdma) nic.ports[0].state = "INIT";
  CHECK(run(in, "ib.ports").status == Status::fail);

  in = healthy();
  in.host.rdma[7].ports[0].link_layer = "Ethernet";
  c = run(in, "ib.link_layer");
  CHECK(c.status == Status::warn);
  CHECK(c.message.find("mlx5_7:1 Ethernet") != std::string::npos);

  in = healthy();
  in.gdr_modules.clear();
  CHECK(run(in, "gdr.module").status == Status::warn);
  in.host.rdma.clear();
  CHECK(run(in, "gdr.module").status == Status::skip);
  CHECK(run(in, "ib.ports").status == Status::skip);
  CHECK(run(in, "ib.link_layer").status == Status::skip);
}

TEST_CASE("limits.memlock, limits.nofile, shm.size") {
  DoctorInputs in = healthy();
  in.memlock = doctor::Rlimit{64 * 1024, 64 * 1024};
  Check c = run(in, "limits.memlock");
  CHECK(c.status == Status::fail);
  CHECK(c.message.find("64.0 KiB") != std::string::npos);
  in.host.rdma.clear();
  CHECK(run(in, "limits.memlock").status == Status::pass);

  in = healthy();
  in.nofile = doctor::Rlimit{4096, 4096};
  CHECK(run(in, "limits.nofile").status == Status::warn);
  in.nofile = doctor::Rlimit{256, 4096};
  CHECK(run(in, "limits.nofile").status == Status::fail);
  in.nofile = doctor::Rlimit{};
  CHECK(run(in, "limits.nofile").status == Status::pass);

  in = healthy();
  in.shm_total_bytes = 64ull * 1024 * 1024;
  c = run(in, "shm.size");
  CHECK(c.status == Status::fail);
  CHECK(c.message == "/dev/shm is 64.0 MiB: NCCL and data loaders fail with bus errors");
  in.shm_total_bytes = 512ull * 1024 * 1024;
  CHECK(run(in, "shm.size").status == Status::warn);
  in.shm_total_bytes.reset();
  in.shm_error = "/dev/shm: No such file or directory";
  CHECK(run(in, "shm.size").status == Status::fail);
}

TEST_CASE("disk space in the log and checkpoint directories") {
  DoctorInputs in = healthy();
  in.disks[0].free_bytes = kGiB / 2;
  CHECK(run(in, "disk.logs").status == Status::fail);
  in.disks[0].free_bytes = 5 * kGiB;
  CHECK(run(in, "disk.logs").status == Status::warn);
  in.disks[1].free_bytes = 100 * kGiB;  // of 10 TiB: under 5 %
  CHECK(run(in, "disk.checkpoints").status == Status::warn);
  in.disks[1] = {"checkpoints", "", "", std::nullopt, std::nullopt, ""};
  CHECK(run(in, "disk.checkpoints").status == Status::skip);
  in.disks[1] = {"checkpoints", "/ckpt/run1", "/ckpt", 900 * kGiB, 1000 * kGiB, ""};
  Check c = run(in, "disk.checkpoints");
  CHECK(c.status == Status::pass);
  CHECK(c.message.find("not created yet") != std::string::npos);
  in.disks[1].error = "statvfs(/ckpt): Permission denied";
  CHECK(run(in, "disk.checkpoints").status == Status::fail);
}

TEST_CASE("env lint: each finding with what to do instead") {
  std::vector<std::string> ifs = {"eth0", "ib0", "lo"};
  auto lint = [&](std::map<std::string, std::string> env) { return doctor::lint_env(env, ifs); };

  auto found = lint({});
  REQUIRE(found.size() == 1);
  CHECK(found[0].id == "env");
  CHECK(found[0].status == Status::pass);

  found = lint({{"NCCL_ASYNC_ERROR_HANDLING", "1"}});
  REQUIRE(found.size() == 1);
  CHECK(found[0].id == "env.NCCL_ASYNC_ERROR_HANDLING");
  CHECK(found[0].status == Status::warn);
  CHECK(found[0].fix == "use TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and unset NCCL_ASYNC_ERROR_HANDLING");
  found = lint({{"NCCL_ASYNC_ERROR_HANDLING", "1"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  CHECK(found[0].message.find("ignored") != std::string::npos);

  found = lint({{"TORCH_NCCL_AVOID_RECORD_STREAMS", "1"}, {"NCCL_BLOCKING_WAIT", "1"}});
  REQUIRE(found.size() == 2);
  CHECK(found[0].id == "env.NCCL_BLOCKING_WAIT");
  CHECK(found[1].id == "env.TORCH_NCCL_AVOID_RECORD_STREAMS");

  CHECK(lint({{"NCCL_DEBUG", "INFO"}})[0].status == Status::warn);
  CHECK(lint({{"NCCL_DEBUG", "WARN"}})[0].id == "env");
  CHECK(lint({{"NCCL_DEBUG_SUBSYS", "INIT,NET"}})[0].id == "env.NCCL_DEBUG_SUBSYS");
  CHECK(lint({{"NCCL_P2P_DISABLE", "1"}})[0].id == "env.NCCL_P2P_DISABLE");
  CHECK(lint({{"NCCL_P2P_DISABLE", "0"}})[0].id == "env");
  CHECK(lint({{"CUDA_LAUNCH_BLOCKING", "1"}})[0].status == Status::warn);
  CHECK(lint({{"TORCH_DISTRIBUTED_DEBUG", "DETAIL"}})[0].status == Status::warn);

  found = lint({{"NCCL_IB_HCA", "mlx5_0,mlx5_1"}});
  CHECK(found[0].status == Status::warn);
  CHECK(found[0].fix == "use exact names: NCCL_IB_HCA==mlx5_0,mlx5_1");
  CHECK(lint({{"NCCL_IB_HCA", "^mlx5_8"}})[0].fix == "use exact names: NCCL_IB_HCA=^=mlx5_8");
  CHECK(lint({{"NCCL_IB_HCA", "=mlx5_0"}})[0].id == "env");
  CHECK(lint({{"NCCL_IB_HCA", "^=mlx5_8"}})[0].id == "env");

  found = lint({{"NCCL_SOCKET_IFNAME", "eth9"}});
  CHECK(found[0].status == Status::fail);
  CHECK(found[0].message == "NCCL_SOCKET_IFNAME=eth9 matches no interface of this node (eth0, ib0, lo)");
  CHECK(lint({{"NCCL_SOCKET_IFNAME", "eth"}})[0].id == "env");
  CHECK(lint({{"NCCL_SOCKET_IFNAME", "=eth"}})[0].status == Status::fail);
  CHECK(lint({{"NCCL_SOCKET_IFNAME", "=eth0"}})[0].id == "env");
  CHECK(lint({{"NCCL_SOCKET_IFNAME", "^docker"}})[0].id == "env");

  DoctorInputs in = healthy();
  in.env = {{"NCCL_SOCKET_IFNAME", "bond0"}};
  CHECK(doctor::run_node_checks(in).exit_code() == 1);
}

TEST_CASE("table and JSON forms") {
  DoctorInputs in = healthy();
  in.shm_total_bytes = 64ull * 1024 * 1024;
  auto report = doctor::run_node_checks(in);
  std::string table = doctor::render_table(report);
  CHECK(table.find("dtrain doctor: gpu-node-7") == 0);
  CHECK(table.find("shm.size            fail    /dev/shm is 64.0 MiB") != std::string::npos);
  CHECK(table.find("fix: enlarge /dev/shm") != std::string::npos);
  CHECK(table.find("20 pass, 0 warn, 1 fail, 0 skip") != std::string::npos);
  auto json = nlohmann::json::parse(doctor::render_json(report));
  CHECK(json["node"] == "gpu-node-7");
  CHECK(json["checks"].size() == report.checks.size());
  for (const auto& c : json["checks"]) {
    CHECK(c.size() == 4);
    CHECK(c.contains("id"));
    CHECK(c.contains("fix"));
  }
  CHECK(json["checks"][0]["id"] == "gpu.visible");
  CHECK(json["checks"][0]["status"] == "pass");
}

TEST_CASE("this machine: the live gather runs and the report's exit code matches its statuses") {
  doctor::GatherOptions options;
  options.log_dir = "/tmp";
  auto report = doctor::run_node_checks(doctor::gather_inputs(options));
  CHECK(!report.node.empty());
  CHECK(report.checks.size() >= 20);
  CHECK(report.exit_code() == (report.failed() ? 1 : 0));
  CHECK(find(report, "disk.logs").status != Status::skip);
  CHECK(find(report, "disk.checkpoints").status == Status::skip);
  CHECK(find(report, "limits.nofile").status != Status::skip);
  CHECK(nlohmann::json::parse(doctor::render_json(report))["checks"].size() == report.checks.size());
}

#ifdef DTRAIN_FAKE_NVML
TEST_CASE("live gather through an NVML library: the GPU checks see its answers") {
  doctor::GatherOptions options;
  options.nvml_library = DTRAIN_FAKE_NVML;
  options.log_dir = "/tmp";
  auto report = doctor::run_node_checks(doctor::gather_inputs(options));
  CHECK(find(report, "gpu.visible").message == "2 GPU(s): 2 x NVIDIA H200");
  CHECK(find(report, "gpu.busy").status == Status::warn);
  CHECK(find(report, "gpu.busy").message.find("GPU0: pid 1000 (1.0 MiB)") != std::string::npos);
  CHECK(find(report, "gpu.driver").message == "driver 570.133.20, CUDA 12.8");
  CHECK(find(report, "gpu.persistence").status == Status::warn);
  CHECK(find(report, "gpu.ecc").status == Status::warn);
  CHECK(find(report, "gpu.memory_rows").status == Status::warn);
  CHECK(find(report, "gpu.clocks").message == "clocks held down: GPU0: hardware thermal slowdown");
  CHECK(find(report, "gpu.pcie").message.find("GPU1: x8 of x16") != std::string::npos);
  CHECK(find(report, "gpu.nvlink").message == "GPU0: link 2 down (3 of 4 active), GPU1: link 2 down (3 of 4 active)");
  CHECK(find(report, "gpu.nvlink").status == Status::fail);
  CHECK(find(report, "gpu.fabric_manager").status == Status::skip);
  CHECK(report.exit_code() == 1);
}
#endif

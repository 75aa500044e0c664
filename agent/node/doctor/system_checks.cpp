// Node checks outside the GPUs: NCCL library, RDMA ports, GPUDirect RDMA, limits, /dev/shm, the CPUs' GEMM rate
// (cpu_gemm_check.h), disk space. One row per check (check_table.h), in the report's order; disk space is one row per
// directory a job writes.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>

#include "agent/node/doctor/check_table.h"
#include "agent/node/doctor/cpu_gemm_check.h"

namespace dtrain::node::doctor {
namespace {

using Row = CheckRow<DoctorInputs>;

constexpr std::uint64_t kMiB = 1024ull * 1024, kGiB = 1024 * kMiB;

std::string nccl_version_text(int code) {
  int major = code >= 10000 ? code / 10000 : code / 1000;
  int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

bool has_gpus(const DoctorInputs& in) { return !in.nvml.gpus.empty() || !in.nvidia_pci_gpus.empty(); }

// A skip predicate's answer: `why_not` where the check does not apply.
std::optional<std::string> unless(bool applies, const char* why_not) {
  if (!applies) return why_not;
  return std::nullopt;
}

Finding nccl_library(const DoctorInputs& in) {
  if (in.nccl.found) {
    return {Status::pass, "NCCL " + nccl_version_text(in.nccl.version_code) + " (" + in.nccl.path + ")"};
  }
  if (has_gpus(in)) return {Status::fail, "libnccl.so.2 not found: " + in.nccl.error};
  return {Status::skip, "libnccl.so.2 not found, and no GPU needs it here (CPU jobs use Gloo)"};
}

Finding ib_ports(const DoctorInputs& in) {
  std::vector<std::string> active, inactive;
  for (const auto& nic : in.host.rdma) {
    for (const auto& p : nic.ports) {
      std::string name = nic.name + ":" + std::to_string(p.port);
      if (p.state == "ACTIVE") {
        active.push_back(name);
      } else {
        inactive.push_back(name + " " + (p.state.empty() ? "unknown" : p.state) +
                           (p.phys_state.empty() ? "" : "/" + p.phys_state));
      }
    }
  }
  if (active.empty()) return {Status::fail, "no RDMA port is ACTIVE (" + join_list(inactive) + ")"};
  if (!inactive.empty()) {
    return {Status::warn, std::to_string(active.size()) + " port(s) ACTIVE, not ACTIVE: " + join_list(inactive)};
  }
  return {Status::pass, std::to_string(active.size()) + " RDMA port(s) ACTIVE"};
}

Finding ib_link_layer(const DoctorInputs& in) {
  std::set<std::string> layers;
  std::vector<std::string> per_nic;
  for (const auto& nic : in.host.rdma) {
    for (const auto& p : nic.ports) {
      layers.insert(p.link_layer.empty() ? "unknown" : p.link_layer);
      per_nic.push_back(nic.name + ":" + std::to_string(p.port) + " " + p.link_layer);
    }
  }
  if (layers.size() > 1) return {Status::warn, "mixed link layers (" + join_list(per_nic) + ")"};
  return {Status::pass, "every RDMA port is " + *layers.begin()};
}

Finding gdr_module(const DoctorInputs& in) {
  if (!has_gpus(in) || in.host.rdma.empty()) return {Status::skip, !has_gpus(in) ? "no GPU" : "no RDMA NIC"};
  if (!in.gdr_modules.empty()) {
    return {Status::pass, "GPUDirect RDMA module loaded (" + join_list(in.gdr_modules) + ")"};
  }
  return {Status::warn,
          "neither nvidia_peermem nor nv_peer_mem is loaded: without DMA-BUF support NCCL stages RDMA through host "
          "memory"};
}

Finding memlock(const DoctorInputs& in) {
  if (!in.memlock->soft) return {Status::pass, "RLIMIT_MEMLOCK unlimited"};
  if (!in.host.rdma.empty()) {
    return {Status::fail,
            "RLIMIT_MEMLOCK is " + human_bytes(*in.memlock->soft) +
                ": RDMA memory registration fails (NCCL: ibv_reg_mr failed)"};
  }
  return {Status::pass, "RLIMIT_MEMLOCK is " + human_bytes(*in.memlock->soft) + " (enough without RDMA NICs)"};
}

Finding nofile(const DoctorInputs& in) {
  std::uint64_t soft = in.nofile->soft.value_or(UINT64_MAX);
  std::string found = "open files limit " + (in.nofile->soft ? std::to_string(soft) : std::string("unlimited"));
  if (soft < 1024) return {Status::fail, found + ": workers run out of descriptors at startup"};
  if (soft < 65536) return {Status::warn, found + ": data loaders and many ranks need more"};
  return {Status::pass, found};
}

Finding shm_size(const DoctorInputs& in) {
  if (!in.shm_total_bytes) return {Status::fail, "/dev/shm unusable: " + in.shm_error};
  if (*in.shm_total_bytes < 256 * kMiB) {
    return {Status::fail,
            "/dev/shm is " + human_bytes(*in.shm_total_bytes) + ": NCCL and data loaders fail with bus errors"};
  }
  if (*in.shm_total_bytes < kGiB) return {Status::warn, "/dev/shm is only " + human_bytes(*in.shm_total_bytes)};
  return {Status::pass, "/dev/shm is " + human_bytes(*in.shm_total_bytes)};
}

const std::vector<Row>& system_rows() {
  static const std::string shm_fix =
      "enlarge /dev/shm: docker --shm-size=16g (or --ipc=host), Kubernetes an emptyDir with medium Memory";
  static const std::string nofile_fix =
      "raise it: ulimit -n 1048576 (limits.conf nofile, systemd LimitNOFILE, docker --ulimit nofile)";
  static const std::vector<Row> rows = {
      {"nccl.library", {}, nccl_library, "", "install NCCL (libnccl2) or add its directory to LD_LIBRARY_PATH"},
      {"ib.ports",
       [](const DoctorInputs& in) {
         return unless(!in.host.rdma.empty(),
                       "no RDMA NIC (/sys/class/infiniband is empty): NCCL uses TCP between nodes");
       },
       ib_ports, "fix the link (ibstat), or leave those NICs out of NCCL_IB_HCA",
       "check cables and the subnet manager (ibstat, opensm); NCCL falls back to TCP meanwhile"},
      {"ib.link_layer", [](const DoctorInputs& in) { return unless(!in.host.rdma.empty(), "no RDMA NIC"); }, ib_link_layer,
       "set NCCL_IB_HCA to the NICs of one fabric (InfiniBand or RoCE), with '=' exact names", ""},
      {"gdr.module", {}, gdr_module, "sudo modprobe nvidia_peermem (and add it to /etc/modules-load.d)", ""},
      {"limits.memlock",
       [](const DoctorInputs& in) { return unless(in.memlock.has_value(), "RLIMIT_MEMLOCK could not be read"); },
       memlock, "",
       "set memlock unlimited: limits.conf '* - memlock unlimited', systemd LimitMEMLOCK=infinity, "
       "docker --ulimit memlock=-1"},
      {"limits.nofile",
       [](const DoctorInputs& in) { return unless(in.nofile.has_value(), "RLIMIT_NOFILE could not be read"); },
       nofile, nofile_fix, nofile_fix},
      {"shm.size", {}, shm_size, shm_fix, shm_fix},
      {"cpu.gemm", {}, cpu_gemm_finding, "", ""},
  };
  return rows;
}

// disk.<purpose>: free space where a job writes its logs or checkpoints.
Row disk_row(std::size_t i, const std::string& purpose) {
  Row row;
  row.id = "disk." + purpose;
  row.skip = [i](const DoctorInputs& in) -> std::optional<std::string> {
    if (in.disks[i].path.empty()) return "no " + in.disks[i].purpose + " directory configured";
    return std::nullopt;
  };
  row.evaluate = [i](const DoctorInputs& in) -> Finding {
    const DiskSpace& d = in.disks[i];
    if (!d.error.empty() || !d.free_bytes || !d.total_bytes) {
      return {Status::fail, d.path + ": " + (d.error.empty() ? "free space unknown" : d.error),
              "create the directory on a writable file system, or point the job elsewhere"};
    }
    std::string where = d.path + (d.probed != d.path ? " (not created yet; on the file system of " + d.probed + ")" : "");
    std::string found = human_bytes(*d.free_bytes) + " free of " + human_bytes(*d.total_bytes) + " in " + where;
    if (*d.free_bytes < kGiB) return {Status::fail, found, "free space there or choose another " + d.purpose + " directory"};
    if (*d.free_bytes < 10 * kGiB || *d.free_bytes * 20 < *d.total_bytes) return {Status::warn, found};
    return {Status::pass, found};
  };
  row.warn_fix = "free space before long runs: a full disk kills the job at its next write";
  return row;
}

}  // namespace

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

std::vector<Check> system_checks(const DoctorInputs& in) {
  std::vector<Row> rows = system_rows();
  for (std::size_t i = 0; i < in.disks.size(); ++i) rows.push_back(disk_row(i, in.disks[i].purpose));
  return run_checks(rows, in);
}

}  // namespace dtrain::node::doctor

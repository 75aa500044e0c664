// Node checks outside the GPUs: NCCL library, RDMA ports, GPUDirect RDMA, limits, /dev/shm, disk space.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>

#include "agent/node/doctor/checks.h"

namespace dtrain::node::doctor {
namespace {

constexpr std::uint64_t kMiB = 1024ull * 1024, kGiB = 1024 * kMiB;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string nccl_version_text(int code) {
  int major = code >= 10000 ? code / 10000 : code / 1000;
  int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

Check disk_check(const DiskSpace& d) {
  std::string id = "disk." + d.purpose;
  if (d.path.empty()) return {id, Status::skip, "no " + d.purpose + " directory configured", ""};
  if (!d.error.empty() || !d.free_bytes || !d.total_bytes) {
    return {id, Status::fail, d.path + ": " + (d.error.empty() ? "free space unknown" : d.error),
            "create the directory on a writable file system, or point the job elsewhere"};
  }
  std::string where = d.path + (d.probed != d.path ? " (not created yet; on the file system of " + d.probed + ")" : "");
  std::string found = human_bytes(*d.free_bytes) + " free of " + human_bytes(*d.total_bytes) + " in " + where;
  if (*d.free_bytes < kGiB) {
    return {id, Status::fail, found, "free space there or choose another " + d.purpose + " directory"};
  }
  if (*d.free_bytes < 10 * kGiB || *d.free_bytes * 20 < *d.total_bytes) {
    return {id, Status::warn, found, "free space before long runs: a full disk kills the job at its next write"};
  }
  return {id, Status::pass, found, ""};
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
  std::vector<Check> out;
  bool gpus = !in.nvml.gpus.empty() || !in.nvidia_pci_gpus.empty();
  const auto& rdma = in.host.rdma;

  if (in.nccl.found) {
    out.push_back({"nccl.library", Status::pass,
                   "NCCL " + nccl_version_text(in.nccl.version_code) + " (" + in.nccl.path + ")", ""});
  } else if (gpus) {
    out.push_back({"nccl.library", Status::fail, "libnccl.so.2 not found: " + in.nccl.error,
                   "install NCCL (libnccl2) or add its directory to LD_LIBRARY_PATH"});
  } else {
    out.push_back({"nccl.library", Status::skip,
                   "libnccl.so.2 not found, and no GPU needs it here (CPU jobs use Gloo)", ""});
  }

  std::vector<std::string> active, inactive;
  std::set<std::string> layers;
  for (const auto& nic : rdma) {
    for (const auto& p : nic.ports) {
      std::string name = nic.name + ":" + std::to_string(p.port);
      if (p.state == "ACTIVE") {
        active.push_back(name);
      } else {
        inactive.push_back(name + " " + (p.state.empty() ? "unknown" : p.state) +
                           (p.phys_state.empty() ? "" : "/" + p.phys_state));
      }
      layers.insert(p.link_layer.empty() ? "unknown" : p.link_layer);
    }
  }
  if (rdma.empty()) {
    out.push_back({"ib.ports", Status::skip, "no RDMA NIC (/sys/class/infiniband is empty): NCCL uses TCP between nodes", ""});
    out.push_back({"ib.link_layer", Status::skip, "no RDMA NIC", ""});
  } else {
    if (active.empty()) {
      out.push_back({"ib.ports", Status::fail, "no RDMA port is ACTIVE (" + join(inactive) + ")",
                     "check cables and the subnet manager (ibstat, opensm); NCCL falls back to TCP meanwhile"});
    } else if (!inactive.empty()) {
      out.push_back({"ib.ports", Status::warn,
                     std::to_string(active.size()) + " port(s) ACTIVE, not ACTIVE: " + join(inactive),
                     "fix the link (ibstat), or leave those NICs out of NCCL_IB_HCA"});
    } else {
      out.push_back({"ib.ports", Status::pass, std::to_string(active.size()) + " RDMA port(s) ACTIVE", ""});
    }
    std::vector<std::string> layer_list(layers.begin(), layers.end());
    if (layers.size() > 1) {
      std::vector<std::string> per_nic;
      for (const auto& nic : rdma) {
        for (const auto& p : nic.ports) per_nic.push_back(nic.name + ":" + std::to_string(p.port) + " " + p.link_layer);
      }
      out.push_back({"ib.link_layer", Status::warn, "mixed link layers (" + join(per_nic) + ")",
                     "set NCCL_IB_HCA to the NICs of one fabric (InfiniBand or RoCE), with '=' exact names"});
    } else {
      out.push_back({"ib.link_layer", Status::pass, "every RDMA port is " + layer_list.front(), ""});
    }
  }

  if (!gpus || rdma.empty()) {
    out.push_back({"gdr.module", Status::skip, !gpus ? "no GPU" : "no RDMA NIC", ""});
  } else if (!in.gdr_modules.empty()) {
    out.push_back({"gdr.module", Status::pass, "GPUDirect RDMA module loaded (" + join(in.gdr_modules) + ")", ""});
  } else {
    out.push_back({"gdr.module", Status::warn,
                   "neither nvidia_peermem nor nv_peer_mem is loaded: without DMA-BUF support NCCL stages RDMA "
                   "through host memory",
                   "sudo modprobe nvidia_peermem (and add it to /etc/modules-load.d)"});
  }

  if (!in.memlock) {
    out.push_back({"limits.memlock", Status::skip, "RLIMIT_MEMLOCK could not be read", ""});
  } else if (!in.memlock->soft) {
    out.push_back({"limits.memlock", Status::pass, "RLIMIT_MEMLOCK unlimited", ""});
  } else if (!rdma.empty()) {
    out.push_back({"limits.memlock", Status::fail,
                   "RLIMIT_MEMLOCK is " + human_bytes(*in.memlock->soft) +
                       ": RDMA memory registration fails (NCCL: ibv_reg_mr failed)",
                   "set memlock unlimited: limits.conf '* - memlock unlimited', systemd LimitMEMLOCK=infinity, "
                   "docker --ulimit memlock=-1"});
  } else {
    out.push_back({"limits.memlock", Status::pass,
                   "RLIMIT_MEMLOCK is " + human_bytes(*in.memlock->soft) + " (enough without RDMA NICs)", ""});
  }

  if (!in.nofile) {
    out.push_back({"limits.nofile", Status::skip, "RLIMIT_NOFILE could not be read", ""});
  } else {
    std::uint64_t soft = in.nofile->soft.value_or(UINT64_MAX);
    std::string found = "open files limit " + (in.nofile->soft ? std::to_string(soft) : std::string("unlimited"));
    std::string fix = "raise it: ulimit -n 1048576 (limits.conf nofile, systemd LimitNOFILE, docker --ulimit nofile)";
    if (soft < 1024) {
      out.push_back({"limits.nofile", Status::fail, found + ": workers run out of descriptors at startup", fix});
    } else if (soft < 65536) {
      out.push_back({"limits.nofile", Status::warn, found + ": data loaders and many ranks need more", fix});
    } else {
      out.push_back({"limits.nofile", Status::pass, found, ""});
    }
  }

  std::string shm_fix = "enlarge /dev/shm: docker --shm-size=16g (or --ipc=host), Kubernetes an emptyDir with "
                        "medium Memory";
  if (!in.shm_total_bytes) {
    out.push_back({"shm.size", Status::fail, "/dev/shm unusable: " + in.shm_error, shm_fix});
  } else if (*in.shm_total_bytes < 256 * kMiB) {
    out.push_back({"shm.size", Status::fail,
                   "/dev/shm is " + human_bytes(*in.shm_total_bytes) + ": NCCL and data loaders fail with bus errors",
                   shm_fix});
  } else if (*in.shm_total_bytes < kGiB) {
    out.push_back({"shm.size", Status::warn, "/dev/shm is only " + human_bytes(*in.shm_total_bytes), shm_fix});
  } else {
    out.push_back({"shm.size", Status::pass, "/dev/shm is " + human_bytes(*in.shm_total_bytes), ""});
  }

  for (const auto& d : in.disks) out.push_back(disk_check(d));
  return out;
}

}  // namespace dtrain::node::doctor

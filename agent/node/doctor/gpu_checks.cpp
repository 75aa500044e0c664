// GPU checks: visibility, other processes, driver, persistence, ECC, memory repair, clocks, PCIe, NVLink, fabric
// manager. Without NVML each says skip with the reason.

#include <algorithm>

#include "agent/node/doctor/checks.h"

namespace dtrain::node::doctor {
namespace {

using topo::NvmlGpu;

std::string gpu_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string gpu_name(const NvmlGpu& g) { return "GPU" + std::to_string(g.index); }

// Collects one line per GPU for which `finding` returns text; returns the GPUs for which the fact was known.
template <typename F>
std::size_t per_gpu(const std::vector<NvmlGpu>& gpus, std::vector<std::string>& lines, F finding) {
  std::size_t known = 0;
  for (const auto& g : gpus) {
    std::optional<std::string> f = finding(g, known);
    if (f && !f->empty()) lines.push_back(gpu_name(g) + ": " + *f);
  }
  return known;
}

Check skip(const std::string& id, const std::string& why) { return {id, Status::skip, why, ""}; }

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

bool has_nvswitch(const DoctorInputs& in) {
  if (std::any_of(in.host.pci.begin(), in.host.pci.end(), topo::is_nvswitch)) return true;
  for (const auto& g : in.nvml.gpus) {
    for (const auto& l : g.nvlinks) {
      if (l.active && l.remote_type == 2) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<Check> gpu_checks(const DoctorInputs& in) {
  std::vector<Check> out;
  const auto& nvml = in.nvml;
  std::size_t on_pci = in.nvidia_pci_gpus.size();

  if (!nvml.loaded || nvml.gpus.empty()) {
    std::string why = !nvml.loaded ? nvml.error : "NVML reports no GPU";
    if (on_pci > 0) {
      out.push_back({"gpu.visible", Status::fail,
                     std::to_string(on_pci) + " NVIDIA GPU(s) on PCI but NVML cannot use them: " + why,
                     "make `nvidia-smi` work: load the driver built for this kernel (check dmesg for NVRM errors)"});
    } else {
      out.push_back(skip("gpu.visible", "no NVIDIA GPU on this node (" + why + ")"));
    }
    std::string reason = "no GPU visible to NVML";
    for (const char* id : {"gpu.busy", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.memory_rows", "gpu.clocks",
                           "gpu.pcie", "gpu.nvlink", "gpu.fabric_manager"}) {
      out.push_back(skip(id, reason));
    }
    return out;
  }

  std::string names;
  {
    std::map<std::string, int> count;
    for (const auto& g : nvml.gpus) ++count[g.name];
    for (const auto& [name, n] : count) names += (names.empty() ? "" : ", ") + std::to_string(n) + " x " + name;
  }
  if (on_pci > nvml.gpus.size()) {
    out.push_back({"gpu.visible", Status::fail,
                   "PCI lists " + std::to_string(on_pci) + " NVIDIA GPUs but NVML only " +
                       std::to_string(nvml.gpus.size()) + " (" + names + ")" +
                       (nvml.error.empty() ? "" : ": " + nvml.error),
                   "a GPU fell off the bus or failed to initialise: check dmesg for Xid errors, then reset or reboot"});
  } else {
    out.push_back({"gpu.visible", Status::pass, std::to_string(nvml.gpus.size()) + " GPU(s): " + names, ""});
  }

  std::vector<std::string> lines;
  std::size_t known = per_gpu(nvml.gpus, lines, [](const NvmlGpu& g, std::size_t& k) -> std::optional<std::string> {
    if (!g.compute_processes) return std::nullopt;
    ++k;
    std::string text;
    for (const auto& p : *g.compute_processes) {
      text += (text.empty() ? "pid " : ", pid ") + std::to_string(p.pid) + " (" + human_bytes(p.used_bytes) + ")";
    }
    return text;
  });
  if (known == 0) {
    out.push_back(skip("gpu.busy", "NVML cannot list the processes on these GPUs"));
  } else if (!lines.empty()) {
    out.push_back({"gpu.busy", Status::warn, "busy with other processes: " + gpu_list(lines),
                   "stop those processes, or give the job other GPUs (CUDA_VISIBLE_DEVICES)"});
  } else {
    out.push_back({"gpu.busy", Status::pass, "no other process uses the GPUs", ""});
  }

  std::string driver = "driver " + (nvml.driver_version.empty() ? std::string("unknown") : nvml.driver_version);
  if (!nvml.cuda_driver_version) {
    out.push_back({"gpu.driver", Status::warn, driver + ", CUDA driver version unknown",
                   "update the NVIDIA driver: it does not report its CUDA version"});
  } else if (*nvml.cuda_driver_version < in.min_cuda_driver_version) {
    out.push_back({"gpu.driver", Status::warn,
                   driver + " supports CUDA up to " + cuda_version_text(*nvml.cuda_driver_version) +
                       ", older than the CUDA " + cuda_version_text(in.min_cuda_driver_version) + " jobs need",
                   "install a newer NVIDIA driver (or use CUDA forward-compatibility packages)"});
  } else {
    out.push_back({"gpu.driver", Status::pass, driver + ", CUDA " + cuda_version_text(*nvml.cuda_driver_version), ""});
  }

  lines.clear();
  known = per_gpu(nvml.gpus, lines, [](const NvmlGpu& g, std::size_t& k) -> std::optional<std::string> {
    if (!g.persistence_mode) return std::nullopt;
    ++k;
    return *g.persistence_mode ? "" : "off";
  });
  if (known == 0) {
    out.push_back(skip("gpu.persistence", "NVML does not report persistence mode here"));
  } else if (!lines.empty()) {
    out.push_back({"gpu.persistence", Status::warn,
                   "persistence mode off (" + gpu_list(lines) + "): each job start re-initialises the GPUs",
                   "sudo nvidia-smi -pm 1, or run nvidia-persistenced"});
  } else {
    out.push_back({"gpu.persistence", Status::pass, "persistence mode on", ""});
  }

  std::vector<std::string> now, ever;
  std::size_t ecc_known = 0;
  for (const auto& g : nvml.gpus) {
    if (g.ecc_uncorrected_volatile || g.ecc_uncorrected_aggregate) ++ecc_known;
    if (g.ecc_uncorrected_volatile.value_or(0) > 0) {
      now.push_back(gpu_name(g) + ": " + std::to_string(*g.ecc_uncorrected_volatile));
    } else if (g.ecc_uncorrected_aggregate.value_or(0) > 0) {
      ever.push_back(gpu_name(g) + ": " + std::to_string(*g.ecc_uncorrected_aggregate));
    }
  }
  if (ecc_known == 0) {
    out.push_back(skip("gpu.ecc", "ECC is off or not supported on these GPUs"));
  } else if (!now.empty()) {
    out.push_back({"gpu.ecc", Status::fail, "uncorrected ECC errors since the driver loaded (" + gpu_list(now) + ")",
                   "drain the node; reset the GPU (nvidia-smi -r) and run dcgmi diag -r 3 before reuse"});
  } else if (!ever.empty()) {
    out.push_back({"gpu.ecc", Status::warn, "uncorrected ECC errors in the GPU's lifetime (" + gpu_list(ever) + ")",
                   "watch these GPUs; if the count grows, take them out of service"});
  } else {
    out.push_back({"gpu.ecc", Status::pass, "no uncorrected ECC error", ""});
  }

  std::vector<std::string> failed, pending, repaired;
  std::size_t rows_known = 0;
  for (const auto& g : nvml.gpus) {
    if (g.remap_pending || g.retired_pages_pending) ++rows_known;
    if (g.remap_failed.value_or(false)) failed.push_back(gpu_name(g) + ": row remapping failed");
    if (g.remap_pending.value_or(false)) pending.push_back(gpu_name(g) + ": row remap pending");
    if (g.retired_pages_pending.value_or(false)) pending.push_back(gpu_name(g) + ": page retirement pending");
    if (g.remapped_rows_uncorrectable.value_or(0) > 0) {
      repaired.push_back(gpu_name(g) + ": " + std::to_string(*g.remapped_rows_uncorrectable) + " rows remapped");
    }
    if (g.retired_pages.value_or(0) > 0) repaired.push_back(gpu_name(g) + ": " + std::to_string(*g.retired_pages) + " pages retired");
  }
  if (rows_known == 0) {
    out.push_back(skip("gpu.memory_rows", "NVML reports neither row remapping nor page retirement here"));
  } else if (!failed.empty()) {
    out.push_back({"gpu.memory_rows", Status::fail, gpu_list(failed),
                   "the GPU's memory cannot be repaired in the field: take it out of service (RMA)"});
  } else if (!pending.empty()) {
    out.push_back({"gpu.memory_rows", Status::warn, gpu_list(pending) + ": applies at the next GPU reset",
                   "reset the GPU when idle (nvidia-smi -r -i N) or reboot the node"});
  } else {
    out.push_back({"gpu.memory_rows", Status::pass,
                   repaired.empty() ? "no pending row remap or page retirement" : "nothing pending (" + gpu_list(repaired) + ")",
                   ""});
  }

  lines.clear();
  known = per_gpu(nvml.gpus, lines, [](const NvmlGpu& g, std::size_t& k) -> std::optional<std::string> {
    if (!g.clock_event_reasons) return std::nullopt;
    ++k;
    std::uint64_t r = *g.clock_event_reasons;
    std::string why;
    auto add = [&](std::uint64_t bit, const char* text) {
      if (r & bit) why += (why.empty() ? "" : ", ") + std::string(text);
    };
    add(topo::kClockHwThermal, "hardware thermal slowdown");
    add(topo::kClockSwThermal, "software thermal slowdown");
    add(topo::kClockHwPowerBrake, "power brake (external power supply signal)");
    add(topo::kClockHwSlowdown, "hardware slowdown");
    return why;
  });
  if (known == 0) {
    out.push_back(skip("gpu.clocks", "NVML does not report clock event reasons here"));
  } else if (!lines.empty()) {
    out.push_back({"gpu.clocks", Status::warn, "clocks held down: " + gpu_list(lines),
                   "check cooling, airflow and power supplies (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)"});
  } else {
    out.push_back({"gpu.clocks", Status::pass, "no thermal or power slowdown", ""});
  }

  lines.clear();
  known = per_gpu(nvml.gpus, lines, [](const NvmlGpu& g, std::size_t& k) -> std::optional<std::string> {
    if (!g.pcie_width || !g.pcie_max_width) return std::nullopt;
    ++k;
    if (*g.pcie_width >= *g.pcie_max_width) return "";
    return "x" + std::to_string(*g.pcie_width) + " of x" + std::to_string(*g.pcie_max_width);
  });
  if (known == 0) {
    out.push_back(skip("gpu.pcie", "NVML does not report PCIe link widths here"));
  } else if (!lines.empty()) {
    out.push_back({"gpu.pcie", Status::warn, "PCIe links narrower than they can be: " + gpu_list(lines),
                   "reseat the GPU or check its slot and riser; host transfers are cut accordingly"});
  } else {
    out.push_back({"gpu.pcie", Status::pass, "PCIe links at full width (idle GPUs may lower the generation; that is normal)", ""});
  }

  std::vector<std::string> down, all_down;
  std::size_t with_links = 0;
  for (const auto& g : nvml.gpus) {
    if (g.nvlinks.empty()) continue;
    ++with_links;
    std::size_t active = std::count_if(g.nvlinks.begin(), g.nvlinks.end(), [](const topo::NvLink& l) { return l.active; });
    if (active == 0) {
      all_down.push_back(gpu_name(g));
    } else if (active < g.nvlinks.size()) {
      std::string which;
      for (const auto& l : g.nvlinks) {
        if (!l.active) which += (which.empty() ? "" : ",") + std::to_string(l.link);
      }
      down.push_back(gpu_name(g) + ": link " + which + " down (" + std::to_string(active) + " of " +
                     std::to_string(g.nvlinks.size()) + " active)");
    }
  }
  if (with_links == 0) {
    out.push_back(skip("gpu.nvlink", "these GPUs have no NVLink"));
  } else if (!down.empty()) {
    out.push_back({"gpu.nvlink", Status::fail, gpu_list(down),
                   "NCCL bandwidth between GPUs drops: reset the GPU; if the link stays down, service the board"});
  } else if (!all_down.empty() && nvml.gpus.size() == 1) {
    out.push_back(skip("gpu.nvlink", "one GPU visible and no NVLink active: nothing to connect within this node"));
  } else if (!all_down.empty()) {
    out.push_back({"gpu.nvlink", Status::warn, "no NVLink active on " + gpu_list(all_down),
                   "on NVSwitch systems start nvidia-fabricmanager; on bridged cards check the NVLink bridge"});
  } else {
    out.push_back({"gpu.nvlink", Status::pass, "every NVLink active", ""});
  }

  // Fabric manager: NVML's GPU fabric registration state where the driver reports it (Hopper and later),
  // otherwise whether the nv-fabricmanager daemon runs. Only NVSwitch systems need it.
  if (!has_nvswitch(in)) {
    out.push_back(skip("gpu.fabric_manager", "no NVSwitch on this node"));
  } else {
    std::vector<std::string> incomplete, errors;
    std::size_t reported = 0;
    for (const auto& g : nvml.gpus) {
      if (!g.fabric_state || *g.fabric_state == 0) continue;
      ++reported;
      if (*g.fabric_state != 3) {
        incomplete.push_back(gpu_name(g) + (*g.fabric_state == 1 ? ": not started" : ": in progress"));
      } else if (g.fabric_status.value_or(0) != 0) {
        errors.push_back(gpu_name(g) + ": registration error " + std::to_string(*g.fabric_status));
      }
    }
    std::string fix = "systemctl enable --now nvidia-fabricmanager (same version as the driver " + nvml.driver_version + ")";
    if (reported > 0 && (!incomplete.empty() || !errors.empty())) {
      incomplete.insert(incomplete.end(), errors.begin(), errors.end());
      out.push_back({"gpu.fabric_manager", Status::fail,
                     "NVSwitch fabric not ready (" + gpu_list(incomplete) + "): CUDA cannot start on these GPUs", fix});
    } else if (reported > 0) {
      out.push_back({"gpu.fabric_manager", Status::pass, "NVSwitch fabric registration complete on every GPU", ""});
    } else if (in.fabric_manager_running) {
      out.push_back({"gpu.fabric_manager", Status::pass, "nv-fabricmanager is running", ""});
    } else {
      out.push_back({"gpu.fabric_manager", Status::fail,
                     "NVSwitch system without a running nv-fabricmanager: CUDA init fails (system not yet initialized)",
                     fix});
    }
  }
  return out;
}

}  // namespace dtrain::node::doctor

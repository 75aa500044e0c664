// GPU checks: visibility, other processes, driver, persistence, ECC, memory repair, clocks, PCIe, NVLink, fabric
// manager. Without NVML each says skip with the reason. One row per check (check_table.h), in the report's order.

#include <algorithm>

#include "agent/node/doctor/check_table.h"

namespace dtrain::node::doctor {
namespace {

using topo::NvmlGpu;
using Row = CheckRow<DoctorInputs>;

std::string gpu_name(const NvmlGpu& g) { return "GPU" + std::to_string(g.index); }

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

bool gpus_visible(const DoctorInputs& in) { return in.nvml.loaded && !in.nvml.gpus.empty(); }

// No GPU check but gpu.visible applies without a GPU visible to NVML.
std::optional<std::string> no_gpu(const DoctorInputs& in) {
  if (!gpus_visible(in)) return "no GPU visible to NVML";
  return std::nullopt;
}

// The skip of a GPU check that also needs the fact it reads (`reported`) from at least one GPU.
std::optional<std::string> gpu_skip(const DoctorInputs& in, bool reported, const char* unreported) {
  if (auto why = no_gpu(in)) return why;
  if (!reported) return unreported;
  return std::nullopt;
}

template <typename Known>
bool any_gpu(const DoctorInputs& in, Known known) {
  return std::any_of(in.nvml.gpus.begin(), in.nvml.gpus.end(), known);
}

// A check that asks each GPU one question. `finding` is nullopt where NVML does not report the fact, "" where the
// GPU is fine, and what is wrong otherwise; the check warns with the list of GPUs that have a finding.
struct PerGpuQuestion {
  const char* id;
  std::optional<std::string> (*finding)(const NvmlGpu&);
  const char* unreported;   // the skip reason when no GPU reports the fact
  const char* warn_before;  // the warning is warn_before + "GPU3: <finding>, GPU5: <finding>" + warn_after
  const char* warn_after;
  const char* all_clear;    // the pass message
  const char* fix;
};

Row per_gpu_row(const PerGpuQuestion& q) {
  Row row{q.id, {}, {}, q.fix, ""};
  row.skip = [q](const DoctorInputs& in) {
    return gpu_skip(in, any_gpu(in, [&](const NvmlGpu& g) { return q.finding(g).has_value(); }), q.unreported);
  };
  row.evaluate = [q](const DoctorInputs& in) -> Finding {
    std::vector<std::string> lines;
    for (const auto& g : in.nvml.gpus) {
      std::optional<std::string> f = q.finding(g);
      if (f && !f->empty()) lines.push_back(gpu_name(g) + ": " + *f);
    }
    if (lines.empty()) return {Status::pass, q.all_clear};
    return {Status::warn, q.warn_before + join_list(lines) + q.warn_after};
  };
  return row;
}

std::optional<std::string> other_processes(const NvmlGpu& g) {
  if (!g.compute_processes) return std::nullopt;
  std::string text;
  for (const auto& p : *g.compute_processes) {
    text += (text.empty() ? "pid " : ", pid ") + std::to_string(p.pid) + " (" + human_bytes(p.used_bytes) + ")";
  }
  return text;
}

std::optional<std::string> persistence_off(const NvmlGpu& g) {
  if (!g.persistence_mode) return std::nullopt;
  return *g.persistence_mode ? "" : "off";
}

std::optional<std::string> clocks_held_down(const NvmlGpu& g) {
  if (!g.clock_event_reasons) return std::nullopt;
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
}

std::optional<std::string> pcie_narrow(const NvmlGpu& g) {
  if (!g.pcie_width || !g.pcie_max_width) return std::nullopt;
  if (*g.pcie_width >= *g.pcie_max_width) return "";
  return "x" + std::to_string(*g.pcie_width) + " of x" + std::to_string(*g.pcie_max_width);
}

// gpu.visible: PCI's NVIDIA GPUs against NVML's. The one GPU check that runs without NVML: it says why there is none.
Finding visible(const DoctorInputs& in) {
  const auto& nvml = in.nvml;
  std::size_t on_pci = in.nvidia_pci_gpus.size();
  if (!gpus_visible(in)) {
    std::string why = !nvml.loaded ? nvml.error : "NVML reports no GPU";
    if (on_pci == 0) return {Status::skip, "no NVIDIA GPU on this node (" + why + ")"};
    return {Status::fail, std::to_string(on_pci) + " NVIDIA GPU(s) on PCI but NVML cannot use them: " + why};
  }
  std::string names;
  std::map<std::string, int> count;
  for (const auto& g : nvml.gpus) ++count[g.name];
  for (const auto& [name, n] : count) names += (names.empty() ? "" : ", ") + std::to_string(n) + " x " + name;
  if (on_pci > nvml.gpus.size()) {
    return {Status::fail,
            "PCI lists " + std::to_string(on_pci) + " NVIDIA GPUs but NVML only " + std::to_string(nvml.gpus.size()) +
                " (" + names + ")" + (nvml.error.empty() ? "" : ": " + nvml.error),
            "a GPU fell off the bus or failed to initialise: check dmesg for Xid errors, then reset or reboot"};
  }
  return {Status::pass, std::to_string(nvml.gpus.size()) + " GPU(s): " + names};
}

Finding driver(const DoctorInputs& in) {
  const auto& nvml = in.nvml;
  std::string driver = "driver " + (nvml.driver_version.empty() ? std::string("unknown") : nvml.driver_version);
  if (!nvml.cuda_driver_version) {
    return {Status::warn, driver + ", CUDA driver version unknown",
            "update the NVIDIA driver: it does not report its CUDA version"};
  }
  if (*nvml.cuda_driver_version < in.min_cuda_driver_version) {
    return {Status::warn, driver + " supports CUDA up to " + cuda_version_text(*nvml.cuda_driver_version) +
                              ", older than the CUDA " + cuda_version_text(in.min_cuda_driver_version) + " jobs need"};
  }
  return {Status::pass, driver + ", CUDA " + cuda_version_text(*nvml.cuda_driver_version)};
}

Finding ecc(const DoctorInputs& in) {
  std::vector<std::string> now, ever;
  for (const auto& g : in.nvml.gpus) {
    if (g.ecc_uncorrected_volatile.value_or(0) > 0) {
      now.push_back(gpu_name(g) + ": " + std::to_string(*g.ecc_uncorrected_volatile));
    } else if (g.ecc_uncorrected_aggregate.value_or(0) > 0) {
      ever.push_back(gpu_name(g) + ": " + std::to_string(*g.ecc_uncorrected_aggregate));
    }
  }
  if (!now.empty()) {
    return {Status::fail, "uncorrected ECC errors since the driver loaded (" + join_list(now) + ")"};
  }
  if (!ever.empty()) {
    return {Status::warn, "uncorrected ECC errors in the GPU's lifetime (" + join_list(ever) + ")"};
  }
  return {Status::pass, "no uncorrected ECC error"};
}

Finding memory_rows(const DoctorInputs& in) {
  std::vector<std::string> failed, pending, repaired;
  for (const auto& g : in.nvml.gpus) {
    if (g.remap_failed.value_or(false)) failed.push_back(gpu_name(g) + ": row remapping failed");
    if (g.remap_pending.value_or(false)) pending.push_back(gpu_name(g) + ": row remap pending");
    if (g.retired_pages_pending.value_or(false)) pending.push_back(gpu_name(g) + ": page retirement pending");
    if (g.remapped_rows_uncorrectable.value_or(0) > 0) {
      repaired.push_back(gpu_name(g) + ": " + std::to_string(*g.remapped_rows_uncorrectable) + " rows remapped");
    }
    if (g.retired_pages.value_or(0) > 0) {
      repaired.push_back(gpu_name(g) + ": " + std::to_string(*g.retired_pages) + " pages retired");
    }
  }
  if (!failed.empty()) return {Status::fail, join_list(failed)};
  if (!pending.empty()) return {Status::warn, join_list(pending) + ": applies at the next GPU reset"};
  return {Status::pass,
          repaired.empty() ? "no pending row remap or page retirement" : "nothing pending (" + join_list(repaired) + ")"};
}

Finding nvlink(const DoctorInputs& in) {
  std::vector<std::string> down, all_down;
  for (const auto& g : in.nvml.gpus) {
    if (g.nvlinks.empty()) continue;
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
  if (!down.empty()) return {Status::fail, join_list(down)};
  if (!all_down.empty() && in.nvml.gpus.size() == 1) {
    return {Status::skip, "one GPU visible and no NVLink active: nothing to connect within this node"};
  }
  if (!all_down.empty()) return {Status::warn, "no NVLink active on " + join_list(all_down)};
  return {Status::pass, "every NVLink active"};
}

bool has_nvswitch(const DoctorInputs& in) {
  if (std::any_of(in.host.pci.begin(), in.host.pci.end(), topo::is_nvswitch)) return true;
  return any_gpu(in, [](const NvmlGpu& g) {
    return std::any_of(g.nvlinks.begin(), g.nvlinks.end(),
                       [](const topo::NvLink& l) { return l.active && l.remote_type == 2; });
  });
}

// Fabric manager: NVML's GPU fabric registration state where the driver reports it (Hopper and later), otherwise
// whether the nv-fabricmanager daemon runs. Only NVSwitch systems need it.
Finding fabric_manager(const DoctorInputs& in) {
  std::vector<std::string> incomplete, errors;
  std::size_t reported = 0;
  for (const auto& g : in.nvml.gpus) {
    if (!g.fabric_state || *g.fabric_state == 0) continue;
    ++reported;
    if (*g.fabric_state != 3) {
      incomplete.push_back(gpu_name(g) + (*g.fabric_state == 1 ? ": not started" : ": in progress"));
    } else if (g.fabric_status.value_or(0) != 0) {
      errors.push_back(gpu_name(g) + ": registration error " + std::to_string(*g.fabric_status));
    }
  }
  std::string fix =
      "systemctl enable --now nvidia-fabricmanager (same version as the driver " + in.nvml.driver_version + ")";
  if (reported > 0 && (!incomplete.empty() || !errors.empty())) {
    incomplete.insert(incomplete.end(), errors.begin(), errors.end());
    return {Status::fail,
            "NVSwitch fabric not ready (" + join_list(incomplete) + "): CUDA cannot start on these GPUs", fix};
  }
  if (reported > 0) return {Status::pass, "NVSwitch fabric registration complete on every GPU"};
  if (in.fabric_manager_running) return {Status::pass, "nv-fabricmanager is running"};
  return {Status::fail,
          "NVSwitch system without a running nv-fabricmanager: CUDA init fails (system not yet initialized)", fix};
}

const std::vector<Row>& gpu_rows() {
  static const std::vector<Row> rows = {
      {"gpu.visible", {}, visible, "",
       "make `nvidia-smi` work: load the driver built for this kernel (check dmesg for NVRM errors)"},
      per_gpu_row({"gpu.busy", other_processes, "NVML cannot list the processes on these GPUs",
                   "busy with other processes: ", "", "no other process uses the GPUs",
                   "stop those processes, or give the job other GPUs (CUDA_VISIBLE_DEVICES)"}),
      {"gpu.driver", no_gpu, driver,
       "install a newer NVIDIA driver (or use CUDA forward-compatibility packages)", ""},
      per_gpu_row({"gpu.persistence", persistence_off, "NVML does not report persistence mode here",
                   "persistence mode off (", "): each job start re-initialises the GPUs", "persistence mode on",
                   "sudo nvidia-smi -pm 1, or run nvidia-persistenced"}),
      {"gpu.ecc",
       [](const DoctorInputs& in) {
         return gpu_skip(in, any_gpu(in, [](const NvmlGpu& g) {
                               return g.ecc_uncorrected_volatile || g.ecc_uncorrected_aggregate;
                             }), "ECC is off or not supported on these GPUs");
       },
       ecc, "watch these GPUs; if the count grows, take them out of service",
       "drain the node; reset the GPU (nvidia-smi -r) and run dcgmi diag -r 3 before reuse"},
      {"gpu.memory_rows",
       [](const DoctorInputs& in) {
         return gpu_skip(in, any_gpu(in, [](const NvmlGpu& g) { return g.remap_pending || g.retired_pages_pending; }),
                         "NVML reports neither row remapping nor page retirement here");
       },
       memory_rows, "reset the GPU when idle (nvidia-smi -r -i N) or reboot the node",
       "the GPU's memory cannot be repaired in the field: take it out of service (RMA)"},
      per_gpu_row({"gpu.clocks", clocks_held_down, "NVML does not report clock event reasons here",
                   "clocks held down: ", "", "no thermal or power slowdown",
                   "check cooling, airflow and power supplies (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)"}),
      per_gpu_row({"gpu.pcie", pcie_narrow, "NVML does not report PCIe link widths here",
                   "PCIe links narrower than they can be: ", "",
                   "PCIe links at full width (idle GPUs may lower the generation; that is normal)",
                   "reseat the GPU or check its slot and riser; host transfers are cut accordingly"}),
      {"gpu.nvlink",
       [](const DoctorInputs& in) {
         return gpu_skip(in, any_gpu(in, [](const NvmlGpu& g) { return !g.nvlinks.empty(); }),
                         "these GPUs have no NVLink");
       },
       nvlink, "on NVSwitch systems start nvidia-fabricmanager; on bridged cards check the NVLink bridge",
       "NCCL bandwidth between GPUs drops: reset the GPU; if the link stays down, service the board"},
      {"gpu.fabric_manager",
       [](const DoctorInputs& in) { return gpu_skip(in, has_nvswitch(in), "no NVSwitch on this node"); },
       fabric_manager, "", ""},
  };
  return rows;
}

}  // namespace

std::vector<Check> gpu_checks(const DoctorInputs& in) { return run_checks(gpu_rows(), in); }

}  // namespace dtrain::node::doctor

#pragma once

// Everything dtrain asks NVML, as plain values: `dtrain topo` and `dtrain doctor` read these, never NVML itself,
// so tests fill the struct by hand and the live path fills it from libnvidia-ml.so.1 (loaded with dlopen, so one
// binary runs on GPU and CPU-only nodes). An optional field is empty where NVML said the query is not supported
// on that GPU (or the driver predates the function).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::node::topo {

// NVML's nvmlGpuTopologyLevel_t values (nvmlDeviceGetTopologyCommonAncestor).
enum class NvmlLevel : int { internal = 0, single = 10, multiple = 20, hostbridge = 30, node = 40, system = 50 };

// What nvidia-smi prints for a level: PIX, PXB, PHB, NODE, SYS ("" for an unknown value).
std::string level_name(int nvml_level);

struct NvLink {
  unsigned link = 0;
  bool active = false;
  std::string remote_pci;   // BDF of the far end, sysfs form ("" when NVML did not say)
  int remote_type = -1;     // nvmlIntNvLinkDeviceType_t: 0 GPU, 1 IBMNPU, 2 NVSwitch, 255 unknown; -1 not reported
                            // (only asked of active links: an inactive link has no far end)
};

struct GpuProcess {
  unsigned pid = 0;
  std::uint64_t used_bytes = 0;
};

struct NvmlGpu {
  unsigned index = 0;
  std::string name;                        // "NVIDIA H100 80GB HBM3"
  std::string pci;                         // sysfs form "0000:18:00.0"
  std::optional<int> numa_id;              // nvmlDeviceGetNumaNodeId: only where the GPU's memory is a NUMA node
  std::vector<NvLink> nvlinks;             // links NVML knows on this GPU (inactive ones included)
  std::vector<int> ancestor;               // per GPU index: NVML topology level (NvmlLevel value), -1 unknown
  std::vector<int> p2p_read;               // per GPU index: nvmlGpuP2PStatus_t for reads (0 = OK), -1 unknown

  // Health, for the doctor.
  std::optional<bool> persistence_mode;
  std::optional<std::uint64_t> ecc_uncorrected_volatile;   // since the last driver load
  std::optional<std::uint64_t> ecc_uncorrected_aggregate;  // over the GPU's life
  std::optional<unsigned> remapped_rows_uncorrectable;     // row remapping (A100 and later)
  std::optional<bool> remap_pending, remap_failed;
  std::optional<unsigned> retired_pages;                   // page retirement (before A100): both causes
  std::optional<bool> retired_pages_pending;
  std::optional<std::uint64_t> clock_event_reasons;        // nvmlClocksEventReason* bit mask
  std::optional<std::vector<GpuProcess>> compute_processes;
  std::optional<unsigned> pcie_width, pcie_max_width, pcie_gen, pcie_max_gen;
  std::optional<int> fabric_state;                         // NVML_GPU_FABRIC_STATE_*: 0 not supported .. 3 completed
  std::optional<int> fabric_status;                        // nvmlReturn_t of the registration, when completed
};

struct NvmlFacts {
  bool loaded = false;             // libnvidia-ml.so.1 was found and initialised
  std::string error;               // why not, in words, when !loaded (or a partial failure)
  std::string driver_version;      // "570.133.20"
  std::optional<int> cuda_driver_version;  // 12080 = CUDA 12.8
  std::vector<NvmlGpu> gpus;       // by NVML index
};

// Clock event reason bits (nvml.h).
inline constexpr std::uint64_t kClockGpuIdle = 0x1, kClockSwPowerCap = 0x4, kClockHwSlowdown = 0x8,
                               kClockSwThermal = 0x20, kClockHwThermal = 0x40, kClockHwPowerBrake = 0x80;

// Reads the facts from the live driver. `library` is the name dlopen looks up.
NvmlFacts read_nvml(const std::string& library = "libnvidia-ml.so.1");

}  // namespace dtrain::node::topo

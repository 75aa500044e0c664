#include "cli/mfu/device_peaks.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "cli/plan/costs/gpus.h"

namespace dtrain::mfu {
namespace {

constexpr double kTera = 1e12;

// A preset's GPU: the names torch.cuda.get_device_name gives it (without the "NVIDIA " prefix), and its fp32 peak.
// The fp32 peaks (FP32 without sparsity or TF32), from the datasheets gpus.cpp cites for the bf16 ones: A100 19.5
// TFLOPS (SXM and PCIe alike), H100 SXM 67 and PCIe 51, H200 SXM 67, HGX B200 600 over 8 GPUs (75 each), L40S 91.6.
// The names are those the CUDA driver reports for these boards (nvidia-smi --query-gpu=name prints the same).
struct DeviceRow {
  const char* preset;
  double fp32_tflops;
  std::array<const char*, 2> names;   // "" for an unused slot
};

constexpr DeviceRow kDevices[] = {
    {"a100-40gb", 19.5, {"A100-SXM4-40GB", "A100-PCIE-40GB"}},
    {"a100-80gb", 19.5, {"A100-SXM4-80GB", "A100 80GB PCIe"}},
    {"h100-sxm", 67, {"H100 80GB HBM3", ""}},
    {"h100-pcie", 51, {"H100 PCIe", ""}},
    {"h200", 67, {"H200", ""}},
    {"b200", 75, {"B200", ""}},
    {"l40s", 91.6, {"L40S", ""}},
};

std::string folded(std::string_view name) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!name.empty() && space(name.front())) name.remove_prefix(1);
  while (!name.empty() && space(name.back())) name.remove_suffix(1);
  std::string out(name);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  constexpr std::string_view kMaker = "nvidia ";
  if (out.starts_with(kMaker)) out.erase(0, kMaker.size());
  return out;
}

}  // namespace

std::optional<DevicePeaks> peaks_of_device(std::string_view device_name) {
  const std::string wanted = folded(device_name);
  if (wanted.empty()) return std::nullopt;
  for (const DeviceRow& row : kDevices) {
    for (const char* name : row.names) {
      if (*name == '\0' || folded(name) != wanted) continue;
      const plan::GpuPreset* preset = plan::find_gpu(row.preset);
      if (preset == nullptr) return std::nullopt;   // unit.mfu checks every row names a preset
      return DevicePeaks{row.preset, preset->peak_flops, row.fp32_tflops * kTera};
    }
  }
  return std::nullopt;
}

std::string known_device_names() {
  std::string out;
  for (const DeviceRow& row : kDevices) {
    for (const char* name : row.names) {
      if (*name != '\0') out += (out.empty() ? "NVIDIA " : ", NVIDIA ") + std::string(name);
    }
  }
  return out;
}

}  // namespace dtrain::mfu

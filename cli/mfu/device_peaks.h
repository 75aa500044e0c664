#pragma once

// The peak FLOP/s of the GPU a rank reports (its device_name, as torch.cuda.get_device_name names it), for its MFU.
// One row per `dtrain plan --gpu` preset: the names its GPU goes by and its fp32 peak; the dense bf16/fp16 peak is
// the preset's own (cli/plan/costs/gpus.cpp, with its datasheet sources), read from there, never copied.
//
// MFU divides by the dense bf16/fp16 tensor-core peak: a worker does not say which dtype its matmuls run in, and
// mixed precision (bf16 or fp16 autocast) is how models worth measuring are trained. An fp32 run's MFU against that
// peak reads low by the ratio of the two (16x on an A100); fp32_flops is here for the day a report carries its dtype.

#include <optional>
#include <string>
#include <string_view>

namespace dtrain::mfu {

struct DevicePeaks {
  const char* preset = "";      // `dtrain plan --gpu`'s name for the GPU ("h100-sxm")
  double dense_half_flops = 0;  // FLOP/s, dense (no structured sparsity) bf16/fp16 on tensor cores: the preset's
  double fp32_flops = 0;        // FLOP/s, fp32 without tensor cores (no TF32)
};

// The peaks of the GPU named `device_name`, or none for a name the table does not hold (and for "cpu"). The name is
// matched whole, ignoring case, surrounding spaces and a leading "NVIDIA " (older drivers leave it out): "NVIDIA
// H200 NVL" is not an "NVIDIA H200" (its peak is lower).
std::optional<DevicePeaks> peaks_of_device(std::string_view device_name);

// Every device name the table knows, comma-separated, for docs and messages.
std::string known_device_names();

}  // namespace dtrain::mfu

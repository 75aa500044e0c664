#pragma once

// The GPUs `dtrain plan --gpu NAME` knows, as their makers publish them: memory, the dense (no structured sparsity)
// bf16/fp16 tensor-core peak, the bandwidth one GPU has to the others of its node (NVLink through NVSwitch, one
// direction; PCIe where there is no NVLink) and to other nodes (the InfiniBand or Ethernet adapter that each GPU of
// the usual system has, one direction), and the GPUs of that system. Each value's source is beside it in gpus.cpp.
// Every flag overrides the preset's value (--gpu-memory, --gpus-per-node, --intra-node-bw, --inter-node-bw,
// --gpu-tflops).
//
// Bandwidths are line rates: what `dtrain bench allreduce` measures as busbw on such a system is below them (NCCL
// reaches most of a link's rate for large messages, not all of it), so a plan from a preset is optimistic about
// communication; give the measured busbw for the cluster at hand. The memory bandwidth (HBM or GDDR) paces the
// optimizer step, an elementwise update that reads and writes every byte of its state once (formulas.h,
// optimizer_seconds); --memory-bw overrides it.
//
// The rate the plan computes at without --gpu-tflops is the peak times kAchievedShareOfPeak.

#include <optional>
#include <string>

namespace dtrain::plan {

struct GpuPreset {
  const char* name;                    // what --gpu takes
  const char* system;                  // the system its interconnect figures are of
  double memory = 0;                   // bytes
  double peak_flops = 0;               // dense bf16/fp16 tensor-core FLOP/s
  double intra_node_bw = 0;            // bytes/s per GPU, one direction
  std::optional<double> inter_node_bw; // bytes/s per GPU, one direction; none when the system has no standard
  int gpus_per_node = 8;
  double memory_bw = 0;                // bytes/s of the GPU's own memory
};

// The share of the dense peak that Megatron-LM's GPT training reached end to end on A100s, 44-52% (Narayanan et al.,
// SC21, arXiv:2104.04473, Table 1, counting recomputation's FLOPs): a preset's compute rate is peak x 0.5 until
// --gpu-tflops gives the one measured.
inline constexpr double kAchievedShareOfPeak = 0.5;

// The preset named `name`, or null.
const GpuPreset* find_gpu(const std::string& name);
// "a100-40gb, a100-80gb, ..." for --help and refusals.
std::string gpu_names();

}  // namespace dtrain::plan

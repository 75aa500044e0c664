#include "cli/plan/costs/gpus.h"

namespace dtrain::plan {
namespace {

constexpr double kGB = 1e9;
constexpr double kTera = 1e12;

// Sources (NVIDIA's datasheets and system guides; "dense" is the figure without structured sparsity, half the
// sparse one the datasheets print first):
//   A100: "NVIDIA A100 Tensor Core GPU" datasheet: 40 GB HBM2 / 80 GB HBM2e, BF16 tensor core 312 TFLOPS dense,
//         NVLink 600 GB/s (both directions: 300 per direction); DGX A100 user guide: eight single-port 200 Gb/s HDR
//         InfiniBand adapters for the compute fabric, one per GPU (25 GB/s).
//   H100 SXM5 and PCIe: "NVIDIA H100 Tensor Core GPU" datasheet: 80 GB, BF16 1,979 / 1,513 TFLOPS with sparsity
//         (989 / 756 dense), NVLink 900 GB/s (SXM; 450 per direction); PCIe Gen5 128 GB/s (64 per direction) for
//         the PCIe card; DGX H100 user guide: eight 400 Gb/s NDR ConnectX-7 ports for the compute fabric (50 GB/s
//         per GPU). A PCIe server's network is the builder's: 400 Gb/s per GPU assumed as in the HGX systems.
//   H200: "NVIDIA H200 Tensor Core GPU" datasheet: 141 GB HBM3e, BF16 1,979 TFLOPS with sparsity (989 dense), NVLink
//         900 GB/s; HGX H200 with 400 Gb/s per GPU as DGX H100.
//   B200: DGX B200 datasheet: 1,440 GB of GPU memory over 8 GPUs (180 GB each), 72 PFLOPS FP8 training (per GPU 9
//         PFLOPS FP8 with sparsity: BF16 2.25 PFLOPS dense), fifth-generation NVLink 1.8 TB/s per GPU (900 GB/s per
//         direction), eight 400 Gb/s ConnectX-7 ports for the compute fabric.
//   L40S: "NVIDIA L40S" datasheet: 48 GB GDDR6, BF16 362.05 TFLOPS dense (733 with sparsity), PCIe Gen4 x16 64 GB/s
//         (32 per direction), no NVLink; no standard multi-node network (give --inter-node-bw).
// The H100 peaks are quoted from the H100 architecture whitepaper (V1.04, Table 1); A100 Selene's network from
// Narayanan et al. SC21, Sec. 5 ("eight NVIDIA Mellanox 200Gbps HDR Infiniband HCAs" per 8-GPU node); the DGX
// H100/H200/B200 networks from NVIDIA's DGX BasePOD reference architecture. Memory bandwidth, from the same
// datasheets: A100 40GB 1,555 GB/s, A100 80GB SXM 2,039 GB/s, H100 SXM 3.35 TB/s, H100 PCIe 2.0 TB/s, H200
// 4.8 TB/s, B200 8 TB/s (DGX B200: 64 TB/s over 8 GPUs), L40S 864 GB/s. The other figures were read from
// transcriptions of the datasheets; B200's memory is 192 GB a package, of which DGX B200 gives 180 GB (1,440 GB / 8).
const GpuPreset kGpus[] = {
    {"a100-40gb", "DGX A100 (HDR InfiniBand)", 40 * kGB, 312 * kTera, 300 * kGB, 25 * kGB, 8, 1555 * kGB},
    {"a100-80gb", "DGX A100 (HDR InfiniBand)", 80 * kGB, 312 * kTera, 300 * kGB, 25 * kGB, 8, 2039 * kGB},
    {"h100-sxm", "DGX H100 (NDR InfiniBand)", 80 * kGB, 989 * kTera, 450 * kGB, 50 * kGB, 8, 3350 * kGB},
    {"h100-pcie", "PCIe Gen5 server, 400 Gb/s per GPU", 80 * kGB, 756 * kTera, 64 * kGB, 50 * kGB, 8, 2000 * kGB},
    {"h200", "HGX H200 (NDR InfiniBand)", 141 * kGB, 989 * kTera, 450 * kGB, 50 * kGB, 8, 4800 * kGB},
    {"b200", "DGX B200 (NDR InfiniBand)", 180 * kGB, 2250 * kTera, 900 * kGB, 50 * kGB, 8, 8000 * kGB},
    {"l40s", "PCIe Gen4 server", 48 * kGB, 362 * kTera, 32 * kGB, std::nullopt, 8, 864 * kGB},
};

}  // namespace

const GpuPreset* find_gpu(const std::string& name) {
  for (const GpuPreset& gpu : kGpus) {
    if (name == gpu.name) return &gpu;
  }
  return nullptr;
}

std::string gpu_names() {
  std::string names;
  for (const GpuPreset& gpu : kGpus) names += (names.empty() ? "" : ", ") + std::string(gpu.name);
  return names;
}

}  // namespace dtrain::plan

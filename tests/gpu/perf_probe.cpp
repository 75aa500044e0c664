// dtrain-kernel-perf: the speed of one training step of GPT-2 124M on the CUDA backend, bf16 matrix products with
// fp32 master weights (AMP as the trainer's CPU path defines it): embedding, 12 layers and the tied LM head forward,
// cross-entropy, the whole backward, AdamW over every parameter and the bf16 copy of the weights refreshed.
// Random weights and tokens: the work per step does not depend on the values. Prints per-phase and per-step times,
// tokens/s and MFU; exit 77 without a GPU. Usage: dtrain-kernel-perf [B] [steps] (defaults 16 and 10;
// at B=16 its buffers add up to about 24 GB of GPU memory).
//
// Model FLOPs per token (what MFU counts; the recomputation and elementwise work are not counted):
//   6 per weight of every matrix product (2 forward, 4 backward): L (12 C^2) + V C weights, V = 50257;
//   causal attention: 6 L T C (q.k and att.v over the s <= t half of each T x T product, forward and backward).
// Peak: 989.5 TFLOP/s, the dense bf16 tensor-core figure for H200 SXM (NVIDIA H200 Tensor Core GPU datasheet lists
// 1,979 TFLOPS for BFLOAT16 "with sparsity"; dense is half). An H200 NVL is rated lower (835.5 dense); pass the
// right figure as DTRAIN_PEAK_TFLOPS for another GPU.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/gpu/check_buffers.h"
#include "tests/gpu/gpt_step.h"

namespace kernels = dtrain::trainer::kernels;
using dtrain::gpu_check::GptStep;
using dtrain::gpu_check::start_cuda;

namespace {

constexpr double kH200DenseBf16 = 989.5e12;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Warm-up, then `steps` timed steps, and the figures.
void run(kernels::CudaBackend& gpu, int B, int steps, double peak) {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, gpu.device());
  GptStep model(gpu, B);
  const auto& s = model.shape();
  std::printf("GPT-2 124M step on %s: B=%d T=%d C=%d L=%d NH=%d V=%d (Vp=%d), bf16 products, fp32 attention\n",
              prop.name, B, s.T, s.C, s.L, s.NH, s.V, s.Vp);
  for (int i = 0; i < 2; ++i) model.step();  // warm-up: cuBLASLt's first calls, page faults
  double forward = 0, backward = 0, update = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    const GptStep::Times t = model.step();
    forward += t.forward;
    backward += t.backward;
    update += t.update;
  }
  const double per_step = seconds_since(start) / steps;
  const double tokens = static_cast<double>(B) * s.T;
  const double matmul_weights = static_cast<double>(s.L) * 12 * s.C * s.C + static_cast<double>(s.V) * s.C;
  const double flops_per_token = 6 * matmul_weights + 6.0 * s.L * s.T * s.C;
  std::printf("step %.2f ms (forward %.2f, backward %.2f, AdamW + bf16 copy %.2f) over %d steps, last loss %.4f\n",
              per_step * 1e3, forward / steps * 1e3, backward / steps * 1e3, update / steps * 1e3, steps,
              model.last_loss());
  std::printf("tokens/s %.0f  model TFLOP/s %.1f  MFU %.1f%% of %.1f TFLOP/s (bf16 dense peak)\n",
              tokens / per_step, tokens * flops_per_token / per_step / 1e12,
              100 * tokens * flops_per_token / per_step / peak, peak / 1e12);
}

}  // namespace

int main(int argc, char** argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 16;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  int exit_code = 0;
  kernels::CudaBackend* gpu = start_cuda(&exit_code);
  if (gpu == nullptr) return exit_code;
  const char* peak_env = std::getenv("DTRAIN_PEAK_TFLOPS");
  const double peak = peak_env != nullptr ? std::atof(peak_env) * 1e12 : kH200DenseBf16;

  try {
    run(*gpu, B, steps, peak);
  } catch (const std::exception& e) {  // a CUDA or cuBLASLt error: the step did not run
    std::printf("FAIL  the GPT-2 step did not run: %s\n", e.what());
    return 1;
  }
  return 0;
}

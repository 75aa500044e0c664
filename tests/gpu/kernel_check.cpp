// dtrain-kernel-check: every entry point of the CUDA backend against the CPU backend (itself checked against
// PyTorch), on random inputs at small odd shapes (not multiples of any tile) and at GPT-2 124M's (C = 768, NH = 12,
// T = 1024, V = 50257 padded to 50304). One line per check (check_buffers.h defines the norm and the PASS rule);
// exit 0 when all pass, 1 when any fails, 77 ("SKIPPED: no CUDA GPU visible") when there is no GPU, which ctest
// reports as skipped.
//
// Tolerances: fp32 paths 1e-4 (the parity bound; cuBLASLt runs them with TF32 off). 16-bit matrix products
// 1e-3 against the CPU's 16-bit products: both multiply the same rounded inputs exactly in fp32, but tensor cores
// add the products in their own order and grouping, which NVIDIA does not document as IEEE fp32 summation.
// Conversions and scaling are bit-exact.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tests/gpu/check_cases.h"
#include "trainer/kernels/cpu/backend.h"

using namespace dtrain::gpu_check;
namespace kernels = dtrain::trainer::kernels;

int main() {
  int exit_code = 0;
  kernels::CudaBackend* gpu = start_cuda(&exit_code);
  if (gpu == nullptr) return exit_code;
  Context context{kernels::cpu_backend(), *gpu, Report{}};
  for (const Case& c : all_cases()) {
    try {
      c.run(context);
    } catch (const std::exception& e) {
      context.report.error(c.name, e.what());
    }
  }
  std::printf("kernel check: %d passed, %d failed\n", context.report.passed(), context.report.failed());
  return context.report.failed() == 0 ? 0 : 1;
}

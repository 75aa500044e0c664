#include "trainer/kernels/cpu/matmul_half.h"

#include <cstddef>
#include <cstring>

#include "trainer/kernels/cpu/gemm_half.h"
#include "trainer/kernels/cpu/parallel.h"

namespace dtrain::trainer::kernels::cpu {

void matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                         const float* bias, int N, int C, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * OC >= kParallelMin)
    for (int n = 0; n < N; ++n) std::memcpy(out + static_cast<std::size_t>(n) * OC, bias, OC * sizeof(float));
  }
  gemm_half(gemm_half_path(type), type, false, true, N, OC, C, 1.0f, inp, C, weight, C, bias != nullptr ? 1.0f : 0.0f,
            out, OC);
}

void matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                          std::uint16_t* dout_half, const std::uint16_t* inp, const std::uint16_t* weight, int N,
                          int C, int OC) {
  const std::size_t count = static_cast<std::size_t>(N) * OC;
  parallel_spans(count, [&](std::size_t i, std::size_t n) { to_half(dout_half + i, dout + i, n, type); });
  const GemmHalfPath path = gemm_half_path(type);
  if (dinp != nullptr) gemm_half(path, type, false, false, N, C, OC, 1.0f, dout_half, OC, weight, C, 0.0f, dinp, C);
  gemm_half(path, type, true, false, OC, C, N, 1.0f, dout_half, OC, inp, C, 1.0f, dweight, C);
  if (dbias == nullptr) return;
  // Column sums in row order per output channel, so the result does not depend on the thread count.
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * OC >= kParallelMin)
  for (int o = 0; o < OC; ++o) {
    float sum = 0.0f;
    for (int n = 0; n < N; ++n) sum += dout[static_cast<std::size_t>(n) * OC + o];
    dbias[o] += sum;
  }
}

}  // namespace dtrain::trainer::kernels::cpu

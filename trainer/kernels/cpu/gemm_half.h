#pragma once

// The CPU backend's matrix product with 16-bit inputs and fp32 accumulation (Backend::gemm_half). Two paths:
//   sbgemm:   OpenBLAS's cblas_sbgemm (bf16 inputs, fp32 accumulation), when the OpenBLAS this process loaded
//             exports it. It is looked up at run time, not at build time: Debian's libopenblas 0.3.21 declares it
//             in cblas.h but is built without BUILD_BFLOAT16, so the symbol is missing, and another OpenBLAS
//             (an alternatives switch, a newer package) may have it without a rebuild of dtrain.
//   convert:  op(B) is widened to fp32 once, op(A) one tile of rows at a time (each thread its own tile), and each
//             tile goes through cblas_sgemm. fp16 always takes this path (OpenBLAS has no fp16 product).
// Both give fp32 products of the 16-bit values; without bf16 instructions (AVX512_BF16, AMX) neither is faster
// than sgemm on fp32 inputs: on the CPU, 16 bits buy memory and bytes on the wire, not speed.

#include <cstdint>

#include "trainer/kernels/half.h"

namespace dtrain::trainer::kernels::cpu {

enum class GemmHalfPath {
  sbgemm,   // cblas_sbgemm
  convert,  // widen to fp32 per tile, then cblas_sgemm
};

// The path gemm_half takes for `type` in this process.
GemmHalfPath gemm_half_path(Dtype type);

// See Backend::gemm_half; `path` must be convert or what gemm_half_path(type) returned.
void gemm_half(GemmHalfPath path, Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
               const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc);

}  // namespace dtrain::trainer::kernels::cpu

#pragma once

// The CPU backend's linear layer with 16-bit inputs (Backend::matmul_forward_half / matmul_backward_half): the
// products go through gemm_half (gemm_half.h), which splits its rows over the OpenMP threads itself; the bias and
// its gradient stay fp32.

#include <cstdint>

#include "trainer/kernels/half.h"

namespace dtrain::trainer::kernels::cpu {

void matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                         const float* bias, int N, int C, int OC);
void matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                          std::uint16_t* dout_half, const std::uint16_t* inp, const std::uint16_t* weight, int N,
                          int C, int OC);

}  // namespace dtrain::trainer::kernels::cpu

#pragma once

// The shm backend's reductions. The order is fixed: element i of the result is
//   ((src[0][i] + src[1][i]) + src[2][i]) + ... + src[n-1][i]     (source k is rank k's data)
// each addition in fp32 (16-bit values are widened, added and rounded back after every addition, as
// kernels::add_half does), so the result is the same bits on every rank, in every run, with AVX2 or without.
// dst may be one of the sources (the same elements, not shifted).

#include <cstddef>
#include <cstdint>

#include "trainer/kernels/half.h"

namespace dtrain::trainer {

void sum_floats(float* dst, const float* const* src, int sources, std::size_t n);
// sum_floats without AVX2 (what sum_floats runs on a CPU without it): the same bits.
void sum_floats_portable(float* dst, const float* const* src, int sources, std::size_t n);
void sum_halves(std::uint16_t* dst, const std::uint16_t* const* src, int sources, std::size_t n, kernels::Dtype type);

// Whether sum_floats runs its AVX2 loop on this CPU (for the benchmark's header).
bool sum_uses_avx2();

}  // namespace dtrain::trainer

#include "trainer/comm/shm/sum.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dtrain::trainer {
namespace {

// The portable loop: one element at a time in rank order; the compiler vectorises it across i (SSE2 at -O2)
// without changing the order of the additions for any element.
void sum_floats_portable(float* dst, const float* const* src, int sources, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float total = src[0][i];
    for (int k = 1; k < sources; ++k) total += src[k][i];
    dst[i] = total;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void sum_floats_avx2(float* dst, const float* const* src, int sources,
                                                       std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(src[0] + i);
    __m256 b = _mm256_loadu_ps(src[0] + i + 8);
    for (int k = 1; k < sources; ++k) {
      a = _mm256_add_ps(a, _mm256_loadu_ps(src[k] + i));
      b = _mm256_add_ps(b, _mm256_loadu_ps(src[k] + i + 8));
    }
    _mm256_storeu_ps(dst + i, a);
    _mm256_storeu_ps(dst + i + 8, b);
  }
  for (; i < n; ++i) {
    float total = src[0][i];
    for (int k = 1; k < sources; ++k) total += src[k][i];
    dst[i] = total;
  }
}

bool have_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#else
bool have_avx2() { return false; }
#endif

// 16-bit sums are accumulated in a scratch block of this many elements: small enough for the stack and L1, large
// enough that the per-block call overhead vanishes.
constexpr std::size_t kHalfBlock = 2048;

}  // namespace

bool sum_uses_avx2() { return have_avx2(); }

void sum_floats(float* dst, const float* const* src, int sources, std::size_t n) {
#if defined(__x86_64__)
  if (have_avx2()) {
    sum_floats_avx2(dst, src, sources, n);
    return;
  }
#endif
  sum_floats_portable(dst, src, sources, n);
}

void sum_halves(std::uint16_t* dst, const std::uint16_t* const* src, int sources, std::size_t n,
                kernels::Dtype type) {
  // Accumulated in a scratch block, not in dst: dst may be a later source, which must not be overwritten first.
  std::uint16_t block[kHalfBlock];
  for (std::size_t at = 0; at < n; at += kHalfBlock) {
    const std::size_t m = std::min(kHalfBlock, n - at);
    std::memcpy(block, src[0] + at, m * sizeof(std::uint16_t));
    for (int k = 1; k < sources; ++k) kernels::add_half(block, block, src[k] + at, m, type);
    std::memcpy(dst + at, block, m * sizeof(std::uint16_t));
  }
}

}  // namespace dtrain::trainer

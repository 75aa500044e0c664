#include "trainer/comm/shm/sum.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dtrain::trainer {
namespace {

// The portable path sums a block at a time into a scratch block, one source per pass, in rank order, 4 floats at a
// time through the compiler's generic vectors (SSE2 on x86-64, NEON on arm64, scalar code elsewhere; plain loops
// with a variable trip count are not vectorised at -O2); the order of the additions for any element is the same as
// the AVX2 loop's. The scratch keeps a dst that is also a source intact until the end.
constexpr std::size_t kFloatBlock = 1024;
typedef float Float4 __attribute__((vector_size(16)));

// block[0, m) += next[0, m).
void add_into(float* block, const float* next, std::size_t m) {
  std::size_t i = 0;
  for (; i + 4 <= m; i += 4) {
    Float4 a, b;
    std::memcpy(&a, block + i, sizeof a);
    std::memcpy(&b, next + i, sizeof b);
    a += b;
    std::memcpy(block + i, &a, sizeof a);
  }
  for (; i < m; ++i) block[i] += next[i];
}

}  // namespace

void sum_floats_portable(float* dst, const float* const* src, int sources, std::size_t n) {
  float block[kFloatBlock];
  for (std::size_t at = 0; at < n; at += kFloatBlock) {
    const std::size_t m = std::min(kFloatBlock, n - at);
    std::memcpy(block, src[0] + at, m * sizeof(float));
    for (int k = 1; k < sources; ++k) add_into(block, src[k] + at, m);
    std::memcpy(dst + at, block, m * sizeof(float));
  }
}

namespace {

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

#pragma once

// How the CPU backend splits work over its OpenMP threads; shared by the backend's ops (backend.cpp) and its 16-bit
// matrix products (gemm_half.cpp).

#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace dtrain::trainer::kernels::cpu {

// Ops on fewer floats than this run on the calling thread: starting threads would cost more than it saves.
constexpr long kParallelMin = 32768;
// Elementwise work is split into spans of this many floats, one OpenMP iteration each.
constexpr std::size_t kSpan = 16384;
// One thread pool: OpenBLAS runs single-threaded (set_cpu_threads) inside OpenMP threads, each on its own slice of
// the output, so OpenBLAS's threads and OpenMP's never compete for the same cores. gemm_rows splits the M rows of
// an M x N x K product over the OpenMP threads (one call when the product is small) and calls fn(m0, m1).
template <typename Fn>
void gemm_rows(int M, int N, int K, Fn fn) {
  const int threads = omp_get_max_threads();
  if (threads == 1 || static_cast<double>(M) * N * K < 64.0 * 64 * 64 || M < 2 * threads) {
    fn(0, M);
    return;
  }
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int m0 = static_cast<int>(static_cast<long>(M) * t / n);
    const int m1 = static_cast<int>(static_cast<long>(M) * (t + 1) / n);
    if (m1 > m0) fn(m0, m1);
  }
}

template <typename SpanFn>
void parallel_spans(std::size_t n, SpanFn fn) {
  const long spans = static_cast<long>((n + kSpan - 1) / kSpan);
#pragma omp parallel for schedule(static) if (spans > 1)
  for (long i = 0; i < spans; ++i) {
    const std::size_t begin = static_cast<std::size_t>(i) * kSpan;
    fn(begin, std::min(kSpan, n - begin));
  }
}

}  // namespace dtrain::trainer::kernels::cpu

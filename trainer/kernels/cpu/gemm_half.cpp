#include "trainer/kernels/cpu/gemm_half.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/kernels/cpu/parallel.h"

namespace dtrain::trainer::kernels::cpu {
namespace {

// Rows of op(A) widened at a time: 64 rows of K <= 4096 floats stay within 1 MiB, in a core's L2 with room for
// the sgemm's own packing.
constexpr int kTileRows = 64;

using Sbgemm = decltype(&cblas_sbgemm);

// cblas_sbgemm from the OpenBLAS already loaded (dtrain_kernels links it), or null when that build lacks it.
Sbgemm find_sbgemm() {
  static const Sbgemm found = reinterpret_cast<Sbgemm>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  return found;
}

// dst (rows, cols), packed, = the fp32 values of src's rows (row stride ld) or, transposed, of its columns:
// dst[r][c] = transposed ? src[c * ld + r] : src[r * ld + c].
void widen(float* dst, const std::uint16_t* src, int rows, int cols, int ld, bool transposed, Dtype type) {
  if (!transposed) {
    for (int r = 0; r < rows; ++r) {
      from_half(dst + static_cast<std::size_t>(r) * cols, src + static_cast<std::size_t>(r) * ld,
                static_cast<std::size_t>(cols), type);
    }
    return;
  }
  for (int c = 0; c < cols; ++c) {
    const std::uint16_t* column = src + static_cast<std::size_t>(c) * ld;
    for (int r = 0; r < rows; ++r) dst[static_cast<std::size_t>(r) * cols + c] = float_from_half(column[r], type);
  }
}

void gemm_convert(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const std::uint16_t* A,
                  int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  // op(B) in fp32, kept in B's own orientation so that sgemm's transpose flag does the rest.
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  std::vector<float> wide_b(static_cast<std::size_t>(b_rows) * b_cols);
#pragma omp parallel for schedule(static) if (static_cast<long>(b_rows) * b_cols >= kParallelMin)
  for (int r = 0; r < b_rows; ++r) {
    from_half(wide_b.data() + static_cast<std::size_t>(r) * b_cols, B + static_cast<std::size_t>(r) * ldb,
              static_cast<std::size_t>(b_cols), type);
  }
  gemm_rows(M, N, K, [&](int m0, int m1) {
    thread_local std::vector<float> tile;
    tile.resize(static_cast<std::size_t>(kTileRows) * K);
    for (int t0 = m0; t0 < m1; t0 += kTileRows) {
      const int rows = std::min(kTileRows, m1 - t0);
      // Row t of op(A) is A's row t, or A's column t when transposed.
      const std::uint16_t* first = trans_a ? A + t0 : A + static_cast<std::size_t>(t0) * lda;
      widen(tile.data(), first, rows, K, lda, trans_a, type);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, rows, N, K, alpha, tile.data(),
                  K, wide_b.data(), b_cols, beta, C + static_cast<std::size_t>(t0) * ldc, ldc);
    }
  });
}

void gemm_sbgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const std::uint16_t* A, int lda,
                 const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  const Sbgemm sbgemm = find_sbgemm();
  gemm_rows(M, N, K, [&](int m0, int m1) {
    const std::uint16_t* first = trans_a ? A + m0 : A + static_cast<std::size_t>(m0) * lda;
    sbgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m1 - m0, N, K,
           alpha, first, lda, B, ldb, beta, C + static_cast<std::size_t>(m0) * ldc, ldc);
  });
}

}  // namespace

GemmHalfPath gemm_half_path(Dtype type) {
  return type == Dtype::bf16 && find_sbgemm() != nullptr ? GemmHalfPath::sbgemm : GemmHalfPath::convert;
}

void gemm_half(GemmHalfPath path, Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
               const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  if (type == Dtype::fp32) {
    throw std::invalid_argument("gemm_half was given fp32 inputs; it multiplies bf16 or fp16 matrices (use sgemm, "
                                "the backend's matmul ops, for fp32)");
  }
  if (M <= 0 || N <= 0) return;
  if (path == GemmHalfPath::sbgemm) {
    if (gemm_half_path(type) != GemmHalfPath::sbgemm) {
      throw std::invalid_argument(std::string("gemm_half: the sbgemm path was asked for ") + dtype_name(type) +
                                  " inputs, but this process's OpenBLAS has no cblas_sbgemm for them; use "
                                  "gemm_half_path() to choose");
    }
    gemm_sbgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  gemm_convert(type, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace dtrain::trainer::kernels::cpu

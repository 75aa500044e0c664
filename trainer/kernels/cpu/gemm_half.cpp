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

// dst (rows, cols), packed, = the fp32 values of src's rows [0, rows) and columns [0, cols) (row stride ld).
void widen(float* dst, const std::uint16_t* src, int rows, int cols, int ld, Dtype type) {
  for (int r = 0; r < rows; ++r) {
    from_half(dst + static_cast<std::size_t>(r) * cols, src + static_cast<std::size_t>(r) * ld,
              static_cast<std::size_t>(cols), type);
  }
}

void gemm_convert(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const std::uint16_t* A,
                  int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  // op(B) in fp32, kept in B's own orientation so that sgemm's transpose flag does the rest.
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  std::vector<float> wide_b(static_cast<std::size_t>(b_rows) * b_cols);
#pragma omp parallel for schedule(static) if (static_cast<long>(b_rows) * b_cols >= kParallelMin)
  for (int r = 0; r < b_rows; ++r) {
    widen(wide_b.data() + static_cast<std::size_t>(r) * b_cols, B + static_cast<std::size_t>(r) * ldb, 1, b_cols,
          ldb, type);
  }
  gemm_rows(M, N, K, [&](int m0, int m1) {
    thread_local std::vector<float> tile;
    tile.resize(static_cast<std::size_t>(kTileRows) * K);
    for (int t0 = m0; t0 < m1; t0 += kTileRows) {
      const int rows = std::min(kTileRows, m1 - t0);
      float* c = C + static_cast<std::size_t>(t0) * ldc;
      const CBLAS_TRANSPOSE op_b = trans_b ? CblasTrans : CblasNoTrans;
      // The tile keeps A's orientation (contiguous reads and writes); sgemm's flag transposes it.
      if (trans_a) {
        widen(tile.data(), A + t0, K, rows, lda, type);
        cblas_sgemm(CblasRowMajor, CblasTrans, op_b, rows, N, K, alpha, tile.data(), rows, wide_b.data(), b_cols,
                    beta, c, ldc);
      } else {
        widen(tile.data(), A + static_cast<std::size_t>(t0) * lda, rows, K, lda, type);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, op_b, rows, N, K, alpha, tile.data(), K, wide_b.data(), b_cols,
                    beta, c, ldc);
      }
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

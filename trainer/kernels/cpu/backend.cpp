#include "trainer/kernels/cpu/backend.h"

#include <cblas.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "trainer/kernels/cpu/gemm_half.h"
#include "trainer/kernels/cpu/matmul_half.h"
#include "trainer/kernels/cpu/parallel.h"
#include "trainer/kernels/cpu/vector_ops.h"

namespace dtrain::trainer::kernels {

namespace {

using cpu::gemm_rows;
using cpu::kParallelMin;
using cpu::kSpan;
using cpu::parallel_spans;

// Attention rows per block (see attention_forward).
constexpr int kAttentionBlock = 64;

// A vector of ones for the column sums of dbias (sgemv with a ones vector), grown on demand.
const float* ones(std::size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.assign(n, 1.0f);
  return buffer.data();
}

// Reductions are deterministic: work is cut into fixed chunks (not per thread), each chunk's partial result is
// kept, and the partials are added in chunk order, so OpenMP's scheduling never changes a bit. With the same thread
// count (matrix products split their rows over the threads), the same inputs give the same results run after run,
// which lets resumed and uninterrupted runs be compared exactly.
constexpr int kRowsPerChunk = 32;

// row(n, a, b) accumulates row n's contribution into the C-vectors a and b; out_a, out_b += the sum over rows.
template <typename RowFn>
void reduce_rows(float* out_a, float* out_b, int N, int C, RowFn row) {
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<float> partial(static_cast<std::size_t>(chunks) * 2 * C, 0.0f);
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * C >= kParallelMin)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    float* a = partial.data() + static_cast<std::size_t>(chunk) * 2 * C;
    for (int n = chunk * kRowsPerChunk; n < std::min(N, (chunk + 1) * kRowsPerChunk); ++n) row(n, a, a + C);
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const float* a = partial.data() + static_cast<std::size_t>(chunk) * 2 * C;
    for (int c = 0; c < C; ++c) {
      out_a[c] += a[c];
      out_b[c] += a[C + c];
    }
  }
}

// One (batch, head) of attention, as offsets: q's first element in qkv (k at +C, v at +2C, rows 3C apart; dq in
// dqkv likewise), its first element in out (rows C apart; dout likewise), and its T x T matrix in att.
struct AttentionHead {
  std::size_t qkv;
  std::size_t out;
  std::size_t att;
};

// fn(head) for each of the B * NH heads, one OpenMP iteration each (all on the calling thread when the whole
// attention is too small to be worth the threads).
template <typename HeadFn>
void parallel_heads(int B, int T, int C, int NH, HeadFn fn) {
  const int hs = C / NH;
#pragma omp parallel for schedule(static) if (static_cast<long>(B) * NH * T * T >= kParallelMin)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    fn(AttentionHead{static_cast<std::size_t>(b) * T * 3 * C + h * hs, static_cast<std::size_t>(b) * T * C + h * hs,
                     static_cast<std::size_t>(bh) * T * T});
  }
}

// In front of every buffer CpuBackend allocates: the size of its mapping (and 64-byte alignment behind it).
constexpr std::size_t kHeaderBytes = 64;

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  // Zeroed memory without touching it: anonymous pages are zero until first written, so a buffer that is
  // allocated but not yet used (the gradients of a ZeRO-2 rank, the parameters a ZeRO-3 rank does not own) costs
  // no resident memory, and pages released with madvise(MADV_DONTNEED) read back as zeros. One 64-byte header in
  // front of the buffer keeps its mapping's size for release() and the buffer 64-byte aligned.
  float* allocate(std::size_t count) override {
    const std::size_t bytes = kHeaderBytes + std::max<std::size_t>(64, (count * sizeof(float) + 63) / 64 * 64);
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    *static_cast<std::size_t*>(map) = bytes;
    return reinterpret_cast<float*>(static_cast<char*>(map) + kHeaderBytes);
  }
  void release(float* data) override {
    if (data == nullptr) return;
    void* map = reinterpret_cast<char*>(data) - kHeaderBytes;
    ::munmap(map, *static_cast<std::size_t*>(map));
  }
  void zero(float* data, std::size_t count) override { std::memset(data, 0, count * sizeof(float)); }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
#pragma omp parallel for schedule(static) if (static_cast<long>(B) * T * C >= kParallelMin)
    for (int n = 0; n < B * T; ++n) {
      const float* te = wte + static_cast<std::size_t>(tokens[n]) * C;
      const float* pe = wpe + static_cast<std::size_t>(n % T) * C;
      float* o = out + static_cast<std::size_t>(n) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
  }

  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                          int C) override {
    // Rows of wte may repeat within a batch, so the scatter is serial; positions are split over threads.
    for (int n = 0; n < B * T; ++n) {
      float* dte = dwte + static_cast<std::size_t>(tokens[n]) * C;
      const float* d = dout + static_cast<std::size_t>(n) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) dte[c] += d[c];
    }
#pragma omp parallel for schedule(static) if (static_cast<long>(B) * T * C >= kParallelMin)
    for (int t = 0; t < T; ++t) {
      float* dpe = dwpe + static_cast<std::size_t>(t) * C;
      for (int b = 0; b < B; ++b) {
        const float* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) dpe[c] += d[c];
      }
    }
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * C >= kParallelMin)
    for (int n = 0; n < N; ++n) {
      const std::size_t row = static_cast<std::size_t>(n) * C;
      cpu::layernorm_forward_row(out + row, mean + n, rstd + n, inp + row, weight, bias, C);
    }
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    reduce_rows(dweight, dbias, N, C, [&](int n, float* dw, float* db) {
      const std::size_t row = static_cast<std::size_t>(n) * C;
      cpu::layernorm_backward_row(dinp + row, dw, db, dout + row, inp + row, weight, mean[n], rstd[n], C);
    });
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                      int OC) override {
    gemm_rows(N, OC, C, [&](int n0, int n1) {
      const std::size_t rows = static_cast<std::size_t>(n1 - n0);
      float* o = out + static_cast<std::size_t>(n0) * OC;
      if (bias != nullptr)
        for (std::size_t n = 0; n < rows; ++n) std::memcpy(o + n * OC, bias, OC * sizeof(float));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n1 - n0, OC, C, 1.0f, inp + std::size_t(n0) * C, C,
                  weight, C, bias != nullptr ? 1.0f : 0.0f, o, OC);
    });
  }

  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override {
    if (dinp != nullptr)
      gemm_rows(N, C, OC, [&](int n0, int n1) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, C, OC, 1.0f, dout + std::size_t(n0) * OC,
                    OC, weight, C, 0.0f, dinp + std::size_t(n0) * C, C);
      });
    // dweight rows [o0, o1) = dout[:, o0:o1]^T inp, so threads split the output channels.
    gemm_rows(OC, C, N, [&](int o0, int o1) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, C, N, 1.0f, dout + o0, OC, inp, C, 1.0f,
                  dweight + std::size_t(o0) * C, C);
      if (dbias != nullptr)
        cblas_sgemv(CblasRowMajor, CblasTrans, N, o1 - o0, 1.0f, dout + o0, OC, ones(static_cast<std::size_t>(N)),
                    1, 1.0f, dbias + o0, 1);
    });
  }

  // Per (batch, head), one thread each: att = softmax(causal(q k^T / sqrt(hs))), out = att v. Rows go in blocks
  // of kAttentionBlock so the products skip the masked upper-right blocks (about 40% of the work at T = 256).
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) override {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    parallel_heads(B, T, C, NH, [&](const AttentionHead& head) {
      const float* q = qkv + head.qkv;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + head.att;
      float* o = out + head.out;
      for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
        const int r1 = std::min(T, r0 + kAttentionBlock);
        float* ab = a + static_cast<std::size_t>(r0) * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale, q + std::size_t(r0) * C3, C3,
                    k, C3, 0.0f, ab, T);
        for (int t = r0; t < r1; ++t) cpu::softmax_prefix(a + static_cast<std::size_t>(t) * T, t + 1, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f, ab, T, v, C3, 0.0f,
                    o + std::size_t(r0) * C, C);
      }
    });
  }

  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                          int B, int T, int C, int NH) override {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    parallel_heads(B, T, C, NH, [&](const AttentionHead& head) {
      float* datt = scratch + static_cast<std::size_t>(omp_get_thread_num()) * kAttentionBlock * T;
      const float* q = qkv + head.qkv;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + head.qkv;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + head.att;
      const float* d = dout + head.out;
      for (int t = 0; t < T; ++t) {  // dk and dv accumulate over row blocks
        std::memset(dk + std::size_t(t) * C3, 0, hs * sizeof(float));
        std::memset(dv + std::size_t(t) * C3, 0, hs * sizeof(float));
      }
      for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
        const int r1 = std::min(T, r0 + kAttentionBlock), rows = r1 - r0;
        const float* ab = a + static_cast<std::size_t>(r0) * T;
        const float* db = d + static_cast<std::size_t>(r0) * C;
        // datt = dout v^T; dv += att^T dout
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, db, C, v, C3, 0.0f, datt, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, ab, T, db, C, 1.0f, dv, C3);
        // Softmax backward in place: dpreatt = att * (datt - sum_s att * datt), zero where att is masked.
        for (int t = r0; t < r1; ++t)
          cpu::softmax_backward_prefix(datt + std::size_t(t - r0) * T, a + std::size_t(t) * T, t + 1, r1);
        // dq = scale * dpreatt k; dk += scale * dpreatt^T q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, scale, datt, T, k, C3, 0.0f,
                    dq + std::size_t(r0) * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, scale, datt, T, q + std::size_t(r0) * C3,
                    C3, 1.0f, dk, C3);
      }
    });
  }

  std::size_t attention_scratch_size(int, int T, int, int) const override {
    return static_cast<std::size_t>(omp_get_max_threads()) * kAttentionBlock * T;
  }

  void gelu_forward(float* out, const float* inp, std::size_t N) override {
    parallel_spans(N, [&](std::size_t i, std::size_t n) { cpu::gelu_forward(out + i, inp + i, n); });
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t N) override {
    parallel_spans(N, [&](std::size_t i, std::size_t n) { cpu::gelu_backward(dinp + i, inp + i, dout + i, n); });
  }

  void residual_forward(float* out, const float* a, const float* b, std::size_t N) override {
    parallel_spans(N, [&](std::size_t i, std::size_t n) { cpu::add(out + i, a + i, b + i, n); });
  }

  float softmax_crossentropy_forward(float* probs, float* losses, const float* logits, const std::int32_t* targets,
                                     int N, int V, int Vp) override {
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
      const std::size_t row = static_cast<std::size_t>(n) * Vp;
      const float loss =
          cpu::softmax_crossentropy_row(probs + row, logits + row, V, Vp, targets != nullptr ? targets[n] : -1);
      if (targets != nullptr) losses[n] = loss;
    }
    if (targets == nullptr) return 0.0f;
    double total = 0.0;  // in position order (see kRowsPerChunk)
    for (int n = 0; n < N; ++n) total += losses[n];
    return static_cast<float>(total / N);
  }

  void softmax_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float dloss,
                                     int N, int V, int Vp) override {
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
      const float* p = probs + static_cast<std::size_t>(n) * Vp;
      float* d = dlogits + static_cast<std::size_t>(n) * Vp;
#pragma omp simd
      for (int i = 0; i < V; ++i) d[i] = p[i] * dloss;
      d[targets[n]] -= dloss;
      for (int i = V; i < Vp; ++i) d[i] = 0.0f;
    }
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, long t) override {
    const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta1), static_cast<double>(t)));
    const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta2), static_cast<double>(t)));
    const float step_size = lr / bc1;
    const float bc2_sqrt = std::sqrt(bc2);
    const float decay = 1.0f - lr * weight_decay;
    parallel_spans(n, [&](std::size_t i, std::size_t count) {
      cpu::adamw(params + i, grads + i, m + i, v + i, count, beta1, beta2, step_size, bc2_sqrt, eps, decay);
    });
  }

  double sum_squares(const float* data, std::size_t n) override {
    const long spans = static_cast<long>((n + kSpan - 1) / kSpan);
    std::vector<double> partial(static_cast<std::size_t>(spans));
#pragma omp parallel for schedule(static) if (spans > 1)
    for (long i = 0; i < spans; ++i) {
      const std::size_t begin = static_cast<std::size_t>(i) * kSpan;
      partial[static_cast<std::size_t>(i)] = cpu::sum_squares(data + begin, std::min(kSpan, n - begin));
    }
    double total = 0.0;  // in span order (see kRowsPerChunk)
    for (double p : partial) total += p;
    return total;
  }

  void scale(float* data, std::size_t n, float factor) override {
    parallel_spans(n, [&](std::size_t i, std::size_t count) { cpu::scale(data + i, count, factor); });
  }

  void to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type) override {
    parallel_spans(n, [&](std::size_t i, std::size_t count) { kernels::to_half(out + i, in + i, count, type); });
  }

  void from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type) override {
    parallel_spans(n, [&](std::size_t i, std::size_t count) { kernels::from_half(out + i, in + i, count, type); });
  }

  void gemm_half(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const std::uint16_t* A,
                 int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) override {
    cpu::gemm_half(cpu::gemm_half_path(type), type, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                           const float* bias, int N, int C, int OC) override {
    cpu::matmul_forward_half(type, out, inp, weight, bias, N, C, OC);
  }

  void matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                            std::uint16_t* dout_half, const std::uint16_t* inp, const std::uint16_t* weight, int N,
                            int C, int OC) override {
    cpu::matmul_backward_half(type, dinp, dweight, dbias, dout, dout_half, inp, weight, N, C, OC);
  }

  bool unscale_and_check(float* data, std::size_t n, float inv_scale) override {
    const long spans = static_cast<long>((n + kSpan - 1) / kSpan);
    bool found = false;
#pragma omp parallel for schedule(static) reduction(|| : found) if (spans > 1)
    for (long i = 0; i < spans; ++i) {
      const std::size_t begin = static_cast<std::size_t>(i) * kSpan;
      found = cpu::scale_and_check(data + begin, std::min(kSpan, n - begin), inv_scale) || found;
    }
    return found;
  }
};

int g_threads = 0;

}  // namespace

Backend& cpu_backend() {
  static CpuBackend& backend = [] () -> CpuBackend& {
    openblas_set_num_threads(1);  // see gemm_rows
    static CpuBackend instance;
    return instance;
  }();
  return backend;
}

void set_cpu_threads(int n) {
  openblas_set_num_threads(1);
  if (n <= 0) return;
  g_threads = n;
  omp_set_num_threads(n);
}

int cpu_threads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

}  // namespace dtrain::trainer::kernels

#include "trainer/kernels/cpu/vector_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#define DTRAIN_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))

namespace dtrain::trainer::kernels::cpu {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial, times 2^n built in the exponent
// bits. Inputs are clamped to [-87.3, 88.3] so 2^n stays a normal float (exp(-87.3) ~ 1e-38 underflows to
// that, not to 0; callers only ever add it to 1 or normalise by a sum that contains exp(0) = 1).
inline float exp_poly(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// out[0, len) = softmax(in[0, len)), out[len, n) = 0; out may be in (in place). Returns the max of in and the sum
// of exp(in - max), from which softmax_crossentropy_row takes the log-probability. Always inlined into its
// multiversioned callers, so it is compiled for each caller's instruction set (a call would run the baseline
// version under the AVX2 one).
struct SoftmaxSums {
  float max;
  float sum;
};
[[gnu::always_inline]] inline SoftmaxSums softmax_into(float* out, const float* in, int len, int n) {
  float maxval = -INFINITY;
#pragma omp simd reduction(max : maxval)
  for (int i = 0; i < len; ++i) maxval = in[i] > maxval ? in[i] : maxval;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < len; ++i) {
    out[i] = exp_poly(in[i] - maxval);
    sum += out[i];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int i = 0; i < len; ++i) out[i] *= inv;
  for (int i = len; i < n; ++i) out[i] = 0.0f;
  return {maxval, sum};
}

}  // namespace

DTRAIN_MULTIVERSION
void gelu_forward(float* out, const float* inp, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = x / (1.0f + exp_poly(-2.0f * u));  // 0.5 x (1 + tanh u) = x sigmoid(2u)
  }
}

DTRAIN_MULTIVERSION
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float s = 1.0f / (1.0f + exp_poly(-2.0f * u));  // 0.5 (1 + tanh u)
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    // d/dx [x s(2u)] = s + x * 2 s (1 - s) * du   (0.5 sech^2 u = 2 s (1 - s))
    dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

DTRAIN_MULTIVERSION
void add(float* out, const float* a, const float* b, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

DTRAIN_MULTIVERSION
void scale(float* data, std::size_t n, float factor) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) data[i] *= factor;
}

DTRAIN_MULTIVERSION
double sum_squares(const float* data, std::size_t n) {
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (std::size_t i = 0; i < n; ++i) total += static_cast<double>(data[i]) * data[i];
  return total;
}

// Non-finite means all exponent bits set; an integer test, so it holds whatever the compiler assumes about NaN.
DTRAIN_MULTIVERSION
bool scale_and_check(float* data, std::size_t n, float factor) {
  std::uint32_t non_finite = 0;
#pragma omp simd reduction(| : non_finite)
  for (std::size_t i = 0; i < n; ++i) {
    non_finite |= (std::bit_cast<std::uint32_t>(data[i]) & 0x7F800000u) == 0x7F800000u;
    data[i] *= factor;
  }
  return non_finite != 0;
}

DTRAIN_MULTIVERSION
void layernorm_forward_row(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                           int C) {
  float m = 0.0f;
#pragma omp simd reduction(+ : m)
  for (int c = 0; c < C; ++c) m += x[c];
  m /= C;
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  var /= C;
  const float s = 1.0f / std::sqrt(var + 1e-5f);
#pragma omp simd
  for (int c = 0; c < C; ++c) out[c] = (x[c] - m) * s * w[c] + b[c];
  *mean = m;
  *rstd = s;
}

DTRAIN_MULTIVERSION
void layernorm_backward_row(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                            float mean, float rstd, int C) {
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int c = 0; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = w[c] * dout[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
#pragma omp simd
  for (int c = 0; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = w[c] * dout[c];
    db[c] += dout[c];
    dw[c] += norm * dout[c];
    dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
  }
}

DTRAIN_MULTIVERSION
void softmax_prefix(float* row, int len, int n) { softmax_into(row, row, len, n); }

DTRAIN_MULTIVERSION
void softmax_backward_prefix(float* d, const float* a, int len, int n) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int i = 0; i < len; ++i) dot += a[i] * d[i];
#pragma omp simd
  for (int i = 0; i < len; ++i) d[i] = a[i] * (d[i] - dot);
  for (int i = len; i < n; ++i) d[i] = 0.0f;
}

DTRAIN_MULTIVERSION
float softmax_crossentropy_row(float* probs, const float* logits, int V, int Vp, int target) {
  const SoftmaxSums sums = softmax_into(probs, logits, V, Vp);
  // From the logits, not from probs, so that a tiny probability keeps its precision.
  return target < 0 ? 0.0f : -(logits[target] - sums.max - std::log(sums.sum));
}

DTRAIN_MULTIVERSION
void adamw(float* params, const float* grads, float* m, float* v, std::size_t n, float beta1, float beta2,
           float step_size, float bc2_sqrt, float eps, float decay) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

}  // namespace dtrain::trainer::kernels::cpu

#pragma once

// The CPU backend's inner loops over one row or one span, without threading (the backend splits work over OpenMP
// threads and calls these). Each is compiled twice, for x86-64-v3 (AVX2 + FMA) and for baseline x86-64, and the
// loader picks the one the CPU supports, so one binary runs everywhere and uses wide vectors where it can.
// exp is a branch-free polynomial (Cephes expf, about 2 ulp) so that the loops vectorise.

#include <cstddef>

namespace dtrain::trainer::kernels::cpu {

// out[i] = gelu_tanh(inp[i]) = inp * sigmoid(2 u), u = sqrt(2/pi) (x + 0.044715 x^3)
void gelu_forward(float* out, const float* inp, std::size_t n);
// dinp[i] = gelu_tanh'(inp[i]) * dout[i]; dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);
// out[i] = a[i] + b[i]
void add(float* out, const float* a, const float* b, std::size_t n);
// data[i] *= factor
void scale(float* data, std::size_t n, float factor);
// sum of data[i]^2 in double
double sum_squares(const float* data, std::size_t n);
// data[i] *= factor; returns whether any data[i] was inf or NaN.
bool scale_and_check(float* data, std::size_t n, float factor);

// One row of LayerNorm (eps 1e-5): out = (x - mean) * rstd * w + b.
void layernorm_forward_row(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                           int C);
// dx += ..., dw += norm * dout, db += dout for one row.
void layernorm_backward_row(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                            float mean, float rstd, int C);

// In place over row[0, len): softmax; row[len, n) = 0.
void softmax_prefix(float* row, int len, int n);
// In place: d[0, len) = a * (d - sum(a * d)); d[len, n) = 0 (softmax backward of a row masked after len).
void softmax_backward_prefix(float* d, const float* a, int len, int n);
// probs[0, V) = softmax(logits[0, V)), probs[V, Vp) = 0; returns -log softmax(logits)[target] (target < 0: 0).
float softmax_crossentropy_row(float* probs, const float* logits, int V, int Vp, int target);

// AdamW over a span, torch.optim.AdamW's formula (see kernels/backend.h).
void adamw(float* params, const float* grads, float* m, float* v, std::size_t n, float beta1, float beta2,
           float step_size, float bc2_sqrt, float eps, float decay);

}  // namespace dtrain::trainer::kernels::cpu

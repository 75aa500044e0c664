#pragma once

// The compute backend: the layer operations of GPT-2, each a forward with its backward, on fp32 buffers that the
// backend allocated. Backends are sibling folders with the same file names: kernels/cpu/backend.{h,cpp} (OpenBLAS
// sgemm + OpenMP) and, later, kernels/cuda/backend.{h,cu}; the model calls only this interface. Mixed precision adds
// 16-bit copies and matrix products with 16-bit inputs (the last group of methods); everything else stays fp32.
//
// Shapes are in the comments, row-major: N = B*T positions. Conventions shared by every backward:
//   - parameter gradients (dweight, dbias, dwte, ...) ACCUMULATE (+=), so gradient accumulation and the tied
//     embedding need no extra buffers;
//   - activation gradients are written (=) unless the comment says "+=".

#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "trainer/kernels/half.h"

namespace dtrain::trainer::kernels {

// A double as two floats, for a float collective that must keep double precision (gradient norms over ranks):
// parts[0] = float(value), parts[1] = float(value - parts[0]); and back, summing n such floats in order in double.
inline void split_double(float* parts, double value) {
  parts[0] = static_cast<float>(value);
  parts[1] = static_cast<float>(value - static_cast<double>(parts[0]));
}
inline double sum_in_double(const float* parts, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += parts[i];
  return sum;
}

class Backend {
 public:
  static constexpr std::align_val_t kHostAlign{64};

  virtual ~Backend() = default;

  // "cpu", "cuda".
  virtual std::string name() const = 0;

  // Memory the ops accept (host memory for cpu, device memory for cuda), zero-filled; release() frees it.
  virtual float* allocate(std::size_t count) = 0;
  virtual void release(float* data) = 0;
  // data[0, count) = 0.
  virtual void zero(float* data, std::size_t count) = 0;

  // Where the backend's memory is, for the code around the ops (the model's set-up, checkpoints, the optimizer's
  // bookkeeping). host_accessible(): whether host code may read and write it directly (cpu: yes; cuda: no, it is
  // device memory). copy_in() copies `bytes` from host memory into the backend's memory, copy_out() the other way;
  // both are ordered after the work enqueued before them and complete when they return. synchronize() waits for
  // everything enqueued. compute_stream(): the queue the ops run on, for a communicator to order its collectives
  // after (cuda: its cudaStream_t; null for a backend that computes on the calling thread). Defaults: host memory,
  // memcpy, nothing to wait for.
  virtual bool host_accessible() const { return true; }
  virtual void copy_in(void* dst, const void* host, std::size_t bytes) {
    if (bytes > 0) std::memcpy(dst, host, bytes);
  }
  virtual void copy_out(void* host, const void* src, std::size_t bytes) {
    if (bytes > 0) std::memcpy(host, src, bytes);
  }
  virtual void synchronize() {}
  virtual void* compute_stream() const { return nullptr; }
  // The device as torch.cuda.get_device_name names it ("NVIDIA H200"), or "cpu" for a backend that computes with
  // the host's cores.
  virtual std::string device_name() const { return "cpu"; }

  // Asynchronous copies of the loader's token ids. allocate_host() gives host memory the device copies from without
  // staging (cuda: page-locked, cudaMallocHost), release_host() frees it; copy_in_async() queues a copy from such
  // memory on the compute stream and returns at once; record_fence() marks the work queued so far and fence_done()
  // says, without waiting, whether the device has passed that mark (then the host memory of a copy queued before
  // it may be written again). allocate_host, release_host and fence_done may be called from any thread. Defaults,
  // for a backend that computes on the host: aligned host memory, copy_in, every fence passed.
  virtual void* allocate_host(std::size_t bytes) { return ::operator new(bytes == 0 ? 1 : bytes, kHostAlign); }
  virtual void release_host(void* data) { ::operator delete(data, kHostAlign); }
  virtual void copy_in_async(void* dst, const void* host, std::size_t bytes) { copy_in(dst, host, bytes); }
  virtual std::uint64_t record_fence() { return 0; }
  virtual bool fence_done(std::uint64_t fence) {
    (void)fence;
    return true;
  }

  // A step's scalars, kept in the backend's memory so that a step on a device reads nothing back (the loop reads
  // them once per --log-every window: trainer/train/report/step_window.h). A `double*` is 8 bytes of the backend's
  // memory (two floats of allocate()). The defaults compute on the host, for backends whose memory it can touch; a device
  // backend computes them with the same arithmetic, so the bits are the same.
  // softmax_crossentropy_forward with targets, the mean loss written to *mean rather than returned.
  virtual void softmax_crossentropy_mean(float* mean, float* probs, float* losses, const float* logits,
                                         const std::int32_t* targets, int N, int V, int Vp) {
    *mean = softmax_crossentropy_forward(probs, losses, logits, targets, N, V, Vp);
  }
  // *out = float((in[0] + ... + in[n - 1], added in order in double) / n).
  virtual void mean_of(float* out, const float* in, std::size_t n) {
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += in[i];
    *out = static_cast<float>(sum / static_cast<double>(n));
  }
  // *acc += sum_squares(data, n).
  virtual void add_sum_squares(double* acc, const float* data, std::size_t n) { *acc += sum_squares(data, n); }
  // parts[0] = float(*value), parts[1] = float(*value - parts[0]): a double as two floats, for a float collective.
  virtual void split_double(float* parts, const double* value) { kernels::split_double(parts, *value); }
  // *out = parts[0] + ... + parts[n - 1], added in order in double.
  virtual void sum_parts(double* out, const float* parts, std::size_t n) { *out = sum_in_double(parts, n); }
  // *norm = float(sqrt(*sum_sq)).
  virtual void norm_of(float* norm, const double* sum_sq) { *norm = static_cast<float>(std::sqrt(*sum_sq)); }
  // torch.nn.utils.clip_grad_norm_ with the norm where the backend keeps it: coef = max_norm / (*norm + 1e-6f);
  // data[0, n) *= coef when coef < 1. Nothing when max_norm <= 0.
  virtual void clip_to(float* data, std::size_t n, const float* norm, float max_norm) {
    if (max_norm <= 0.0f) return;
    const float coef = max_norm / (*norm + 1e-6f);
    if (coef < 1.0f) scale(data, n, coef);
  }

  // out (N, C) = wte[tokens[n]] + wpe[n % T]; tokens (N) with N = B*T.
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B,
                                 int T, int C) = 0;
  // dwte[tokens[n]] += dout[n]; dwpe[n % T] += dout[n].
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B,
                                  int T, int C) = 0;

  // out (N, C) = (inp - mean) * rstd * weight + bias over each row, eps 1e-5; mean, rstd (N) kept for backward.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int N, int C) = 0;
  // dinp (N, C) += ...; dweight, dbias (C) +=.
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, int N, int C) = 0;

  // out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                              int OC) = 0;
  // dinp (N, C) = dout @ weight; dweight (OC, C) += dout^T @ inp; dbias (OC) += column sums of dout (if non-null).
  // dinp may be null (not needed).
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int N, int C, int OC) = 0;

  // Causal self-attention. qkv (B, T, 3C) holds q | k | v per position, head h at channels [h*hs, (h+1)*hs).
  // att (B, NH, T, T) = softmax over s <= t of q_t . k_s / sqrt(hs) (zero for s > t), kept for backward;
  // out (B, T, C) = att @ v per head.
  virtual void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) = 0;
  // dqkv (B, T, 3C) =. scratch: attention_scratch_size() floats, asked for just before the call (the size may
  // depend on the backend's thread count).
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* att, int B, int T, int C, int NH) = 0;
  virtual std::size_t attention_scratch_size(int B, int T, int C, int NH) const = 0;

  // out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(float* out, const float* inp, std::size_t N) = 0;
  // dinp (N) = gelu'(inp) * dout; dinp may alias dout.
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t N) = 0;

  // out (N) = a + b; out may alias a.
  virtual void residual_forward(float* out, const float* a, const float* b, std::size_t N) = 0;

  // Softmax over the first V of Vp logits per row (probs of padded columns = 0) and cross-entropy:
  // probs (N, Vp); losses (N) = -log probs[n, targets[n]]. Returns the mean loss over N, summed in position
  // order (deterministic); targets may be null (probs only, returns 0).
  virtual float softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                             const std::int32_t* targets, int N, int V, int Vp) = 0;
  // dlogits (N, Vp) = dloss * (probs - onehot(target)) for the first V columns, 0 for padded ones, where dloss is
  // the gradient of the scalar objective with respect to each position's loss (loss_scale / N for a mean).
  // dlogits may alias probs.
  virtual void softmax_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                             float dloss, int N, int V, int Vp) = 0;

  // One AdamW step over params[0, n) as torch.optim.AdamW (t is the 1-based step count):
  //   p *= 1 - lr * weight_decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  //   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, long t) = 0;

  // Sum of squares of data[0, n), in double.
  virtual double sum_squares(const float* data, std::size_t n) = 0;
  // data[0, n) *= factor.
  virtual void scale(float* data, std::size_t n, float factor) = 0;

  // Mixed precision. `type` is bf16 or fp16, rounded as kernels/half.h defines (the same bits on every backend).
  // out (n) = in rounded to `type`; from_half: out (n) = in as fp32 (exact).
  virtual void to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type) = 0;
  virtual void from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type) = 0;
  // out (n) = round(float(round(in)) / divisor): half.h's to_half_divided, PyTorch's fp16/bf16 DDP compression hook
  // (`bucket.to(dtype).div_(world)`). Default: on the host.
  virtual void to_half_divided(std::uint16_t* out, const float* in, std::size_t n, float divisor, Dtype type) {
    kernels::to_half_divided(out, in, n, divisor, type);
  }
  // C (M, N) = alpha op(A) op(B) + beta C, row-major as cblas_sgemm with op(X) = X or X^T: op(A) is (M, K),
  // op(B) is (K, N). A and B hold 16-bit values of `type`, C is fp32, and the products accumulate in fp32 (as
  // cuBLAS's gemmEx with CUBLAS_COMPUTE_32F): the result is an fp32 product of the 16-bit inputs, only the order
  // of the additions may differ from sgemm's.
  virtual void gemm_half(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                         const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, float* C,
                         int ldc) = 0;
  // matmul_forward with 16-bit inp (N, C) and weight (OC, C) of `type`; the products accumulate in fp32 and out
  // and bias stay fp32 (autocast's linear, with an fp32 result).
  virtual void matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                                   const float* bias, int N, int C, int OC) = 0;
  // matmul_backward of matmul_forward_half: dout (N, OC) is first rounded to `type` into dout_half (N * OC
  // values, scratch), as the gradient a 16-bit product receives; dinp (N, C) = dout_half @ weight and
  // dweight (OC, C) += dout_half^T @ inp accumulate in fp32; dbias (OC) += column sums of the fp32 dout.
  // dinp and dbias may be null.
  virtual void matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                                    std::uint16_t* dout_half, const std::uint16_t* inp, const std::uint16_t* weight,
                                    int N, int C, int OC) = 0;
  // Dynamic loss scaling's unscale (torch's _amp_foreach_non_finite_check_and_unscale_): data[0, n) *= inv_scale;
  // returns whether any element was inf or NaN (those stay non-finite).
  virtual bool unscale_and_check(float* data, std::size_t n, float inv_scale) = 0;
};

// `count` floats of a backend's memory, zeroed, released with the owner: a step's scalars and scratch.
class BackendArray {
 public:
  BackendArray() = default;
  BackendArray(Backend& backend, std::size_t count) : backend_(&backend), data_(backend.allocate(count)) {}
  ~BackendArray() {
    if (backend_ != nullptr) backend_->release(data_);
  }
  BackendArray(BackendArray&& other) noexcept : backend_(other.backend_), data_(other.data_) {
    other.backend_ = nullptr;
    other.data_ = nullptr;
  }
  BackendArray& operator=(BackendArray&& other) noexcept {
    std::swap(backend_, other.backend_);
    std::swap(data_, other.data_);
    return *this;
  }
  float* data() const { return data_; }
  // The 8 bytes at floats [at, at + 2) as a double (`at` even: allocate() aligns the start).
  double* as_double(std::size_t at) const { return reinterpret_cast<double*>(data_ + at); }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
};

// The 16-bit conversions where the buffers are, for code that serves host and device memory alike (the reducers,
// the ZeRO gatherer): on `device` when given (a backend whose memory the host cannot touch), else on the host
// (half.h), which is what the host path has always called.
inline void to_half_on(Backend* device, std::uint16_t* out, const float* in, std::size_t n, Dtype type) {
  if (device != nullptr) {
    device->to_half(out, in, n, type);
  } else {
    to_half(out, in, n, type);
  }
}
inline void to_half_divided_on(Backend* device, std::uint16_t* out, const float* in, std::size_t n, float divisor,
                               Dtype type) {
  if (device != nullptr) {
    device->to_half_divided(out, in, n, divisor, type);
  } else {
    to_half_divided(out, in, n, divisor, type);
  }
}
inline void from_half_on(Backend* device, float* out, const std::uint16_t* in, std::size_t n, Dtype type) {
  if (device != nullptr) {
    device->from_half(out, in, n, type);
  } else {
    from_half(out, in, n, type);
  }
}

}  // namespace dtrain::trainer::kernels

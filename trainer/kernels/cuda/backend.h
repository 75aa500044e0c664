#pragma once

// The CUDA backend: the Backend interface (trainer/kernels/backend.h) on one GPU, same functions and layouts as the
// CPU backend. Matrix products through cuBLASLt (blaslt.h: fp32 without TF32; bf16/fp16 inputs accumulating in
// fp32), the rest in the kernels of launch.h. Declared without CUDA's headers so that the factory (factory.h)
// and a build without CUDA see the same interface.
//
// Memory: every pointer a method takes is DEVICE memory (allocate() is cudaMalloc), the token ids and targets of
// embedding_* and softmax_crossentropy_* included; copy host data in with copy_to_device.
// Ordering: every method enqueues its work on the backend's one stream (stream()) and returns without waiting,
// except the three that return a value to the host, each of which synchronises that stream:
//   softmax_crossentropy_forward   the mean loss (not when targets is null: then it returns 0 without waiting)
//   sum_squares                    the double
//   unscale_and_check              the bool
// allocate() and release() (cudaMalloc / cudaFree) may synchronise the whole device; allocate outside the step. Every
// free (release(), release_host()) is noted as a host wait (common/host_wait.h): one inside a step is reported.
// Threads: the backend makes its device current on the thread that creates it; call it from that thread.
// Attention: attention_forward writes no T x T matrix. `att` holds, in its first B * NH * T floats, the log of each
// row's softmax denominator (lse), which attention_backward reads to recompute the probabilities; the rest of att
// is not touched. attention_scratch_size is B * NH * T floats.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "trainer/kernels/backend.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace dtrain::trainer::kernels {
namespace cuda {
struct GemmArgs;  // blaslt.h
}

class CudaBackend final : public Backend {
 public:
  // Makes `device` current, creates the stream, cuBLASLt's handle and workspace; throws std::runtime_error when
  // any of them fails (factory.h's make_backend checks first that the device exists).
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  int device() const { return device_; }
  // The stream all work goes to: communication waits on events recorded here.
  CUstream_st* stream() const { return stream_; }
  // Copies on the stream; both wait for it to finish, so `host` may be reused on return.
  void copy_to_device(void* device, const void* host, std::size_t bytes);
  void copy_to_host(void* host, const void* device, std::size_t bytes);
  // Waits for everything enqueued so far; throws what a failed kernel left behind. Like the two copies above and
  // the three methods that return a value, a host wait (trainer/common/host_wait.h).
  void synchronize() override;
  // Device memory for 16-bit values or token ids (allocate() is for floats): `bytes` zeroed, freed with release().
  void* allocate_bytes(std::size_t bytes);
  void release_bytes(void* data);

  std::string name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  void copy_in(void* dst, const void* host, std::size_t bytes) override { copy_to_device(dst, host, bytes); }
  void copy_out(void* host, const void* src, std::size_t bytes) override { copy_to_host(host, src, bytes); }
  void* compute_stream() const override { return stream_; }
  std::string device_name() const override;  // cudaGetDeviceProperties' name
  float* allocate(std::size_t count) override;
  void release(float* data) override;
  void zero(float* data, std::size_t count) override;
  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                          int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override;
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                      int OC) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override;
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) override;
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                          int T, int C, int NH) override;
  std::size_t attention_scratch_size(int B, int T, int C, int NH) const override;
  void gelu_forward(float* out, const float* inp, std::size_t N) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t N) override;
  void residual_forward(float* out, const float* a, const float* b, std::size_t N) override;
  float softmax_crossentropy_forward(float* probs, float* losses, const float* logits, const std::int32_t* targets,
                                     int N, int V, int Vp) override;
  void softmax_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float dloss,
                                     int N, int V, int Vp) override;
  void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, long t) override;
  double sum_squares(const float* data, std::size_t n) override;
  void scale(float* data, std::size_t n, float factor) override;
  void to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type) override;
  void from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type) override;
  void to_half_divided(std::uint16_t* out, const float* in, std::size_t n, float divisor, Dtype type) override;
  void gemm_half(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const std::uint16_t* A,
                 int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) override;
  void matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                           const float* bias, int N, int C, int OC) override;
  void matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                            std::uint16_t* dout_half, const std::uint16_t* inp, const std::uint16_t* weight, int N,
                            int C, int OC) override;
  bool unscale_and_check(float* data, std::size_t n, float inv_scale) override;

  // The loader's token ids: page-locked host memory (cudaMallocHost / cudaFreeHost), cudaMemcpyAsync on the stream,
  // and fences that are CUDA events recorded on it (queried with cudaEventQuery, never waited for).
  void* allocate_host(std::size_t bytes) override;
  void release_host(void* data) override;
  void copy_in_async(void* dst, const void* host, std::size_t bytes) override;
  std::uint64_t record_fence() override;
  bool fence_done(std::uint64_t fence) override;
  // A step's scalars on the device (scalars.cu), nothing read back.
  void softmax_crossentropy_mean(float* mean, float* probs, float* losses, const float* logits,
                                 const std::int32_t* targets, int N, int V, int Vp) override;
  void mean_of(float* out, const float* in, std::size_t n) override;
  void add_sum_squares(double* acc, const float* data, std::size_t n) override;
  void split_double(float* parts, const double* value) override;
  void sum_parts(double* out, const float* parts, std::size_t n) override;
  void norm_of(float* norm, const double* sum_sq) override;
  void clip_to(float* data, std::size_t n, const float* norm, float max_norm) override;

 private:
  struct Device;  // what needs CUDA's headers: the cuBLASLt handle, the reduction scratch (backend.cpp)

  // Waits for the stream, noted as the host wait `what` (common/host_wait.h).
  void wait_stream(const char* what);
  // Device scratch of at least `bytes` for the reductions' partial sums; grown (reallocated) on demand.
  void* scratch(std::size_t bytes);
  // out = inp weight^T + bias for both matmul forwards: cuBLASLt's bias epilogue, or the bias broadcast into out
  // and a product with beta 1 where cuBLASLt has no epilogue for the types.
  void linear_forward(cuda::GemmArgs args);
  // out (C) += column sums of in (N, C): the dbias of both matrix-product backwards.
  void add_column_sums(float* out, const float* in, int N, int C);

  int device_;
  CUstream_st* stream_ = nullptr;
  std::unique_ptr<Device> state_;
};

}  // namespace dtrain::trainer::kernels

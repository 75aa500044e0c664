#include "trainer/kernels/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainer/common/host_wait.h"
#include "trainer/kernels/cuda/blaslt.h"
#include "trainer/kernels/cuda/error.h"
#include "trainer/kernels/cuda/launch.h"
#include "trainer/kernels/cuda/shapes.h"

namespace dtrain::trainer::kernels {

using cuda::check;
using cuda::check_launch;

namespace {

cuda::Half half_of(Dtype type, const char* where) {
  if (type == Dtype::fp32) {
    throw std::invalid_argument(std::string("cuda backend: ") + where + " was asked for fp32; it takes bf16 or fp16");
  }
  return type == Dtype::bf16 ? cuda::Half::bf16 : cuda::Half::fp16;
}

cuda::GemmInput gemm_input(Dtype type, const char* where) {
  return half_of(type, where) == cuda::Half::bf16 ? cuda::GemmInput::bf16 : cuda::GemmInput::fp16;
}

}  // namespace

struct CudaBackend::Device {
  // The values that return to the host, in one small device allocation.
  struct Results {
    double sum_squares;
    double step_sum;  // add_sum_squares' addend
    float mean_loss;
    int non_finite;
  };

  explicit Device(cudaStream_t stream) : blas(stream) {}
  cuda::BlasLt blas;
  // record_fence's events, oldest first, and the ones passed, for reuse; fence ids count from 1.
  std::mutex fence_mutex;
  std::deque<std::pair<std::uint64_t, cudaEvent_t>> fences;
  std::vector<cudaEvent_t> spare_events;
  std::uint64_t last_fence = 0;
  std::uint64_t passed_fence = 0;
  Results* results = nullptr;  // device
  void* scratch = nullptr;     // device, scratch_bytes
  std::size_t scratch_bytes = 0;
};

CudaBackend::CudaBackend(int device) : device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = stream;
  state_ = std::make_unique<Device>(stream);
  check(cudaMalloc(reinterpret_cast<void**>(&state_->results), sizeof(Device::Results)), "cudaMalloc of the results");
}

CudaBackend::~CudaBackend() {
  // Errors ignored: at exit the driver may be shutting down, and a destructor must not throw.
  if (state_ != nullptr) {
    for (auto& fence : state_->fences) cudaEventDestroy(fence.second);
    for (cudaEvent_t event : state_->spare_events) cudaEventDestroy(event);
    if (state_->scratch != nullptr) cudaFreeAsync(state_->scratch, stream_);
    cudaStreamSynchronize(stream_);
    cudaFree(state_->results);
  }
  state_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::copy_to_device(void* device, const void* host, std::size_t bytes) {
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "copy to the device");
  wait_stream("copy to the device");
}

void CudaBackend::copy_to_host(void* host, const void* device, std::size_t bytes) {
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "copy to the host");
  wait_stream("copy to the host");
}

std::string CudaBackend::device_name() const {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device_) != cudaSuccess) return "cuda";
  return properties.name;
}

void CudaBackend::synchronize() { wait_stream("synchronize"); }

void CudaBackend::wait_stream(const char* what) {
  note_host_wait(what);
  check(cudaStreamSynchronize(stream_), "a kernel on the backend's stream");
}

void* CudaBackend::allocate_bytes(std::size_t bytes) {
  void* data = nullptr;
  check(cudaMalloc(&data, bytes == 0 ? 1 : bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
  check(cudaMemsetAsync(data, 0, bytes, stream_), "zeroing a new buffer");
  return data;
}

void CudaBackend::release_bytes(void* data) {
  if (data == nullptr) return;
  note_host_wait("cudaFree");
  check(cudaFree(data), "cudaFree");
}

float* CudaBackend::allocate(std::size_t count) { return static_cast<float*>(allocate_bytes(count * sizeof(float))); }

void CudaBackend::release(float* data) { release_bytes(data); }

void CudaBackend::zero(float* data, std::size_t count) {
  check(cudaMemsetAsync(data, 0, count * sizeof(float), stream_), "zero");
}

// Grown in stream order (cudaMallocAsync / cudaFreeAsync): freed after the queued kernels read it, with no host wait.
void* CudaBackend::scratch(std::size_t bytes) {
  if (bytes > state_->scratch_bytes) {
    if (state_->scratch != nullptr) check(cudaFreeAsync(state_->scratch, stream_), "cudaFreeAsync of the scratch");
    state_->scratch = nullptr;
    state_->scratch_bytes = 0;
    check(cudaMallocAsync(&state_->scratch, bytes, stream_),
          "cudaMallocAsync of " + std::to_string(bytes) + " bytes of scratch");
    state_->scratch_bytes = bytes;
  }
  return state_->scratch;
}

void CudaBackend::linear_forward(cuda::GemmArgs args) {
  if (args.bias == nullptr) return state_->blas.gemm(args);
  if (state_->blas.try_gemm(args)) return;
  // No algorithm with the bias epilogue for these types: the bias goes into out first, as the CPU backend does.
  cuda::broadcast_rows(stream_, args.C, args.bias, args.M, args.N);
  check_launch("broadcast_rows");
  args.bias = nullptr;
  args.beta = 1.0f;
  state_->blas.gemm(args);
}

void CudaBackend::add_column_sums(float* out, const float* in, int N, int C) {
  float* partial = static_cast<float*>(scratch(static_cast<std::size_t>(cuda::row_chunks(N)) * C * sizeof(float)));
  cuda::column_sums(stream_, out, partial, in, N, C);
  check_launch("column_sums");
}

void CudaBackend::embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B,
                                    int T, int C) {
  cuda::embedding_forward(stream_, out, tokens, wte, wpe, B, T, C);
  check_launch("embedding_forward");
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B,
                                     int T, int C) {
  cuda::embedding_backward(stream_, dwte, dwpe, dout, tokens, B, T, C);
  check_launch("embedding_backward");
}

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, int N, int C) {
  cuda::layernorm_forward(stream_, out, mean, rstd, inp, weight, bias, N, C);
  check_launch("layernorm_forward");
}

void CudaBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, int N, int C) {
  float* partial = static_cast<float*>(scratch(static_cast<std::size_t>(cuda::row_chunks(N)) * 2 * C * sizeof(float)));
  cuda::layernorm_backward(stream_, dinp, dweight, dbias, partial, dout, inp, weight, mean, rstd, N, C);
  check_launch("layernorm_backward");
}

void CudaBackend::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                                 int OC) {
  linear_forward({.trans_b = true, .M = N, .N = OC, .K = C, .A = inp, .lda = C, .B = weight, .ldb = C, .C = out,
                  .ldc = OC, .bias = bias});
}

void CudaBackend::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, int N, int C, int OC) {
  if (dinp != nullptr) {
    state_->blas.gemm({.M = N, .N = C, .K = OC, .A = dout, .lda = OC, .B = weight, .ldb = C, .C = dinp, .ldc = C});
  }
  state_->blas.gemm({.trans_a = true, .M = OC, .N = C, .K = N, .A = dout, .lda = OC, .B = inp, .ldb = C,
                     .beta = 1.0f, .C = dweight, .ldc = C});
  if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
}

void CudaBackend::attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  cuda::attention_forward(stream_, out, att, qkv, B, T, C, NH);
  check_launch("attention_forward");
}

void CudaBackend::attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                     const float* att, int B, int T, int C, int NH) {
  cuda::attention_backward(stream_, dqkv, scratch, dout, qkv, att, B, T, C, NH);
  check_launch("attention_backward");
}

std::size_t CudaBackend::attention_scratch_size(int B, int T, int, int NH) const {
  return cuda::attention_scratch_floats(B, T, NH);
}

void CudaBackend::gelu_forward(float* out, const float* inp, std::size_t N) {
  cuda::gelu_forward(stream_, out, inp, N);
  check_launch("gelu_forward");
}

void CudaBackend::gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t N) {
  cuda::gelu_backward(stream_, dinp, inp, dout, N);
  check_launch("gelu_backward");
}

void CudaBackend::residual_forward(float* out, const float* a, const float* b, std::size_t N) {
  cuda::residual_forward(stream_, out, a, b, N);
  check_launch("residual_forward");
}

float CudaBackend::softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                                const std::int32_t* targets, int N, int V, int Vp) {
  cuda::softmax_crossentropy_forward(stream_, probs, losses, &state_->results->mean_loss, logits, targets, N, V, Vp);
  check_launch("softmax_crossentropy_forward");
  if (targets == nullptr) return 0.0f;
  float mean = 0.0f;
  copy_to_host(&mean, &state_->results->mean_loss, sizeof(mean));
  return mean;
}

void CudaBackend::softmax_crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                                float dloss, int N, int V, int Vp) {
  cuda::softmax_crossentropy_backward(stream_, dlogits, probs, targets, dloss, N, V, Vp);
  check_launch("softmax_crossentropy_backward");
}

void CudaBackend::adamw_update(float* params, const float* grads, float* m, float* v, std::size_t n, float lr,
                               float beta1, float beta2, float eps, float weight_decay, long t) {
  // The bias corrections as the CPU backend computes them (in double, then fp32), so both step the same sizes.
  const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta1), static_cast<double>(t)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta2), static_cast<double>(t)));
  cuda::adamw(stream_, params, grads, m, v, n, beta1, beta2, lr / bc1, std::sqrt(bc2), eps, 1.0f - lr * weight_decay);
  check_launch("adamw");
}

double CudaBackend::sum_squares(const float* data, std::size_t n) {
  double* partial = static_cast<double*>(scratch(cuda::kSumBlocks * sizeof(double)));
  cuda::sum_squares(stream_, &state_->results->sum_squares, partial, data, n);
  check_launch("sum_squares");
  double sum = 0.0;
  copy_to_host(&sum, &state_->results->sum_squares, sizeof(sum));
  return sum;
}

void CudaBackend::scale(float* data, std::size_t n, float factor) {
  cuda::scale(stream_, data, n, factor);
  check_launch("scale");
}

void CudaBackend::to_half(std::uint16_t* out, const float* in, std::size_t n, Dtype type) {
  cuda::to_half(stream_, out, in, n, half_of(type, "to_half"));
  check_launch("to_half");
}

void CudaBackend::from_half(float* out, const std::uint16_t* in, std::size_t n, Dtype type) {
  cuda::from_half(stream_, out, in, n, half_of(type, "from_half"));
  check_launch("from_half");
}

void CudaBackend::gemm_half(Dtype type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, float* C,
                            int ldc) {
  state_->blas.gemm({.input = gemm_input(type, "gemm_half"), .trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N,
                     .K = K, .alpha = alpha, .A = A, .lda = lda, .B = B, .ldb = ldb, .beta = beta, .C = C, .ldc = ldc});
}

void CudaBackend::matmul_forward_half(Dtype type, float* out, const std::uint16_t* inp, const std::uint16_t* weight,
                                      const float* bias, int N, int C, int OC) {
  linear_forward({.input = gemm_input(type, "matmul_forward_half"), .trans_b = true, .M = N, .N = OC, .K = C,
                  .A = inp, .lda = C, .B = weight, .ldb = C, .C = out, .ldc = OC, .bias = bias});
}

void CudaBackend::matmul_backward_half(Dtype type, float* dinp, float* dweight, float* dbias, const float* dout,
                                       std::uint16_t* dout_half, const std::uint16_t* inp,
                                       const std::uint16_t* weight, int N, int C, int OC) {
  const cuda::GemmInput input = gemm_input(type, "matmul_backward_half");
  to_half(dout_half, dout, static_cast<std::size_t>(N) * OC, type);
  if (dinp != nullptr) {
    state_->blas.gemm({.input = input, .M = N, .N = C, .K = OC, .A = dout_half, .lda = OC, .B = weight, .ldb = C,
                       .C = dinp, .ldc = C});
  }
  state_->blas.gemm({.input = input, .trans_a = true, .M = OC, .N = C, .K = N, .A = dout_half, .lda = OC, .B = inp,
                     .ldb = C, .beta = 1.0f, .C = dweight, .ldc = C});
  if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
}

bool CudaBackend::unscale_and_check(float* data, std::size_t n, float inv_scale) {
  check(cudaMemsetAsync(&state_->results->non_finite, 0, sizeof(int), stream_), "unscale_and_check");
  cuda::scale_and_flag(stream_, data, n, inv_scale, &state_->results->non_finite);
  check_launch("unscale_and_check");
  int flag = 0;
  copy_to_host(&flag, &state_->results->non_finite, sizeof(flag));
  return flag != 0;
}

void* CudaBackend::allocate_host(std::size_t bytes) {
  void* data = nullptr;
  check(cudaMallocHost(&data, bytes == 0 ? 1 : bytes), "cudaMallocHost of " + std::to_string(bytes) + " bytes");
  return data;
}

void CudaBackend::release_host(void* data) {
  if (data == nullptr) return;
  note_host_wait("cudaFreeHost");
  check(cudaFreeHost(data), "cudaFreeHost");
}

void CudaBackend::copy_in_async(void* dst, const void* host, std::size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "copy to the device");
}

std::uint64_t CudaBackend::record_fence() {
  std::lock_guard lock(state_->fence_mutex);
  cudaEvent_t event = nullptr;
  if (state_->spare_events.empty()) {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags (a fence)");
  } else {
    event = state_->spare_events.back();
    state_->spare_events.pop_back();
  }
  check(cudaEventRecord(event, stream_), "cudaEventRecord (a fence)");
  state_->fences.emplace_back(++state_->last_fence, event);
  return state_->last_fence;
}

bool CudaBackend::fence_done(std::uint64_t fence) {
  std::lock_guard lock(state_->fence_mutex);
  // Events on one stream complete in order: the oldest ones are retired until one is still pending.
  while (fence > state_->passed_fence && !state_->fences.empty()) {
    const auto [id, event] = state_->fences.front();
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) break;
    check(status, "a fence on the backend's stream");
    state_->passed_fence = id;
    state_->spare_events.push_back(event);
    state_->fences.pop_front();
  }
  return fence <= state_->passed_fence;
}

void CudaBackend::to_half_divided(std::uint16_t* out, const float* in, std::size_t n, float divisor, Dtype type) {
  cuda::to_half_divided(stream_, out, in, n, divisor, half_of(type, "to_half_divided"));
  check_launch("to_half_divided");
}

void CudaBackend::softmax_crossentropy_mean(float* mean, float* probs, float* losses, const float* logits,
                                            const std::int32_t* targets, int N, int V, int Vp) {
  cuda::softmax_crossentropy_forward(stream_, probs, losses, mean, logits, targets, N, V, Vp);
  check_launch("softmax_crossentropy_mean");
}

void CudaBackend::mean_of(float* out, const float* in, std::size_t n) {
  cuda::mean_of(stream_, out, in, n);
  check_launch("mean_of");
}

void CudaBackend::add_sum_squares(double* acc, const float* data, std::size_t n) {
  double* partial = static_cast<double*>(scratch(cuda::kSumBlocks * sizeof(double)));
  cuda::add_sum_squares(stream_, acc, &state_->results->step_sum, partial, data, n);
  check_launch("add_sum_squares");
}

void CudaBackend::split_double(float* parts, const double* value) {
  cuda::split_double(stream_, parts, value);
  check_launch("split_double");
}

void CudaBackend::sum_parts(double* out, const float* parts, std::size_t n) {
  cuda::sum_parts(stream_, out, parts, n);
  check_launch("sum_parts");
}

void CudaBackend::norm_of(float* norm, const double* sum_sq) {
  cuda::norm_of(stream_, norm, sum_sq);
  check_launch("norm_of");
}

void CudaBackend::clip_to(float* data, std::size_t n, const float* norm, float max_norm) {
  if (max_norm <= 0.0f) return;
  cuda::clip_to(stream_, data, n, norm, max_norm);
  check_launch("clip_to");
}

}  // namespace dtrain::trainer::kernels

// Elementwise and scatter kernels of the CUDA backend (launch.h). Arithmetic follows the CPU backend's
// (cpu/vector_ops.cpp) operation for operation; where the order of roundings matters for bit-exact results
// (half conversions, the loss gradient) the intrinsics __fmul_rn / __fadd_rn keep nvcc from fusing them into FMAs.

#include "trainer/kernels/cuda/launch.h"
#include "trainer/kernels/cuda/shapes.h"

namespace dtrain::trainer::kernels::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// for (i = first index of this thread; i < n; i += all threads)
#define DTRAIN_GRID_STRIDE(i, n)                                                                       \
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);       \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                         int T, int C, std::size_t total) {
  DTRAIN_GRID_STRIDE(i, total) {
    const std::size_t n = i / C;
    const int c = static_cast<int>(i % C);
    out[i] = wte[static_cast<std::size_t>(tokens[n]) * C + c] + wpe[(n % T) * C + c];
  }
}

// One thread per channel walks the positions in order: rows of wte repeat within a batch, and this keeps the
// additions in the CPU backend's order without atomics.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const std::int32_t* tokens, int N,
                                              int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) dwte[static_cast<std::size_t>(tokens[n]) * C + c] += dout[static_cast<std::size_t>(n) * C + c];
}

// dwpe[t, c] += dout[b, t, c] for b in order.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t total = static_cast<std::size_t>(T) * C;
  DTRAIN_GRID_STRIDE(i, total) {
    float sum = dwpe[i];
    for (int b = 0; b < B; ++b) sum += dout[static_cast<std::size_t>(b) * total + i];
    dwpe[i] = sum;
  }
}

__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t n) {
  DTRAIN_GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = x / (1.0f + expf(-2.0f * u));  // 0.5 x (1 + tanh u) = x sigmoid(2u)
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  DTRAIN_GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

__global__ void residual_kernel(float* out, const float* a, const float* b, std::size_t n) {
  DTRAIN_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void broadcast_rows_kernel(float* out, const float* bias, int C, std::size_t total) {
  DTRAIN_GRID_STRIDE(i, total) out[i] = bias[i % C];
}

__global__ void scale_kernel(float* data, std::size_t n, float factor) {
  DTRAIN_GRID_STRIDE(i, n) data[i] = __fmul_rn(data[i], factor);
}

// Non-finite is all exponent bits set, tested on the integer bits as the CPU backend does.
__global__ void scale_and_flag_kernel(float* data, std::size_t n, float factor, int* flag) {
  bool found = false;
  DTRAIN_GRID_STRIDE(i, n) {
    found |= (__float_as_uint(data[i]) & 0x7F800000u) == 0x7F800000u;
    data[i] = __fmul_rn(data[i], factor);
  }
  if (__any_sync(0xFFFFFFFFu, found) && (threadIdx.x % 32) == 0) atomicOr(flag, 1);
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, std::size_t n, float beta1,
                             float beta2, float step_size, float bc2_sqrt, float eps, float decay) {
  DTRAIN_GRID_STRIDE(i, n) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

// kernels/half.h's bf16_from_float: integer arithmetic only.
__device__ std::uint16_t bf16_from_float(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? 0x7FC0u : rounded);
}

// kernels/half.h's fp16_from_float: the rounding is done by one fp32 addition, so the products and the sum are
// each rounded on their own (no FMA).
__device__ std::uint16_t fp16_from_float(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  const std::uint32_t doubled = bits + bits;
  const std::uint32_t sign = bits & 0x80000000u;
  std::uint32_t bias = doubled & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  float magnitude = __fmul_rn(__fmul_rn(__uint_as_float(bits & 0x7FFFFFFFu), 0x1.0p+112f), 0x1.0p-110f);
  magnitude = __fadd_rn(__uint_as_float((bias >> 1) + 0x07800000u), magnitude);
  const std::uint32_t sum = __float_as_uint(magnitude);
  const std::uint32_t nonsign = ((sum >> 13) & 0x00007C00u) + (sum & 0x00000FFFu);
  return static_cast<std::uint16_t>((sign >> 16) | (doubled > 0xFF000000u ? 0x7E00u : nonsign));
}

__device__ float float_from_fp16(std::uint16_t value) {
  const std::uint32_t word = static_cast<std::uint32_t>(value) << 16;
  const std::uint32_t sign = word & 0x80000000u;
  const std::uint32_t doubled = word + word;
  const float normal = __fmul_rn(__uint_as_float((doubled >> 4) + (0xE0u << 23)), 0x1.0p-112f);
  const float subnormal = __fadd_rn(__uint_as_float((doubled >> 17) | (126u << 23)), -0.5f);
  const std::uint32_t magnitude = doubled < (1u << 27) ? __float_as_uint(subnormal) : __float_as_uint(normal);
  // Infinities and NaNs by their bits: the GPU's multiply returns its one canonical NaN for any NaN input, where the
  // host's keeps sign and payload (quieting a signalling NaN), which is what the CPU backend's bits are.
  if ((value & 0x7C00u) == 0x7C00u) {
    const std::uint32_t mantissa = static_cast<std::uint32_t>(value & 0x3FFu) << 13;
    return __uint_as_float(sign | 0x7F800000u | mantissa | (mantissa != 0 ? 0x400000u : 0u));
  }
  return __uint_as_float(sign | magnitude);
}

__global__ void to_half_kernel(std::uint16_t* out, const float* in, std::size_t n, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n) out[i] = bf16 ? bf16_from_float(in[i]) : fp16_from_float(in[i]);
}

__device__ float float_from_half(std::uint16_t value, bool bf16) {
  return bf16 ? __uint_as_float(static_cast<std::uint32_t>(value) << 16) : float_from_fp16(value);
}

__global__ void to_half_divided_kernel(std::uint16_t* out, const float* in, std::size_t n, float divisor, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n) {
    const float rounded = float_from_half(bf16 ? bf16_from_float(in[i]) : fp16_from_float(in[i]), bf16);
    // A NaN passes as it is: the GPU's divide returns its canonical NaN, the host's keeps sign and payload.
    const float divided = isnan(rounded) ? rounded : __fdiv_rn(rounded, divisor);
    out[i] = bf16 ? bf16_from_float(divided) : fp16_from_float(divided);
  }
}

__global__ void from_half_kernel(float* out, const std::uint16_t* in, std::size_t n, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n) {
    out[i] = bf16 ? __uint_as_float(static_cast<std::uint32_t>(in[i]) << 16) : float_from_fp16(in[i]);
  }
}

}  // namespace

void embedding_forward(cudaStream_t stream, float* out, const std::int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C) {
  const std::size_t total = static_cast<std::size_t>(B) * T * C;
  embedding_forward_kernel<<<elementwise_blocks(total), kThreads, 0, stream>>>(out, tokens, wte, wpe, T, C, total);
}

void embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                        const std::int32_t* tokens, int B, int T, int C) {
  // 32 channels to a block: C / 32 blocks of coalesced row reads (24 for GPT-2's C = 768).
  embedding_backward_wte_kernel<<<static_cast<int>(blocks_for(C, 32)), 32, 0, stream>>>(dwte, dout, tokens, B * T,
                                                                                          C);
  const std::size_t total = static_cast<std::size_t>(T) * C;
  embedding_backward_wpe_kernel<<<elementwise_blocks(total), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
}

void gelu_forward(cudaStream_t stream, float* out, const float* inp, std::size_t n) {
  gelu_forward_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(out, inp, n);
}

void gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, std::size_t n) {
  gelu_backward_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(dinp, inp, dout, n);
}

void residual_forward(cudaStream_t stream, float* out, const float* a, const float* b, std::size_t n) {
  residual_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(out, a, b, n);
}

void broadcast_rows(cudaStream_t stream, float* out, const float* bias, int N, int C) {
  const std::size_t total = static_cast<std::size_t>(N) * C;
  broadcast_rows_kernel<<<elementwise_blocks(total), kThreads, 0, stream>>>(out, bias, C, total);
}

void scale(cudaStream_t stream, float* data, std::size_t n, float factor) {
  scale_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(data, n, factor);
}

void scale_and_flag(cudaStream_t stream, float* data, std::size_t n, float factor, int* flag) {
  scale_and_flag_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(data, n, factor, flag);
}

void adamw(cudaStream_t stream, float* params, const float* grads, float* m, float* v, std::size_t n, float beta1,
           float beta2, float step_size, float bc2_sqrt, float eps, float decay) {
  adamw_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(params, grads, m, v, n, beta1, beta2, step_size,
                                                               bc2_sqrt, eps, decay);
}

void to_half(cudaStream_t stream, std::uint16_t* out, const float* in, std::size_t n, Half type) {
  to_half_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(out, in, n, type == Half::bf16);
}

void to_half_divided(cudaStream_t stream, std::uint16_t* out, const float* in, std::size_t n, float divisor,
                     Half type) {
  to_half_divided_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(out, in, n, divisor, type == Half::bf16);
}

void from_half(cudaStream_t stream, float* out, const std::uint16_t* in, std::size_t n, Half type) {
  from_half_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(out, in, n, type == Half::bf16);
}

}  // namespace dtrain::trainer::kernels::cuda

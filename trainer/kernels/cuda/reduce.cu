// Reductions of the CUDA backend (launch.h): sum of squares, column sums, LayerNorm. Every reduction has a fixed
// shape (fixed block counts, fixed chunks of rows, fixed trees), never atomics, so its result is the same bits run
// after run, as the CPU backend's.

#include "trainer/kernels/cuda/launch.h"
#include "trainer/kernels/cuda/shapes.h"

namespace dtrain::trainer::kernels::cuda {
namespace {

constexpr unsigned kFullWarp = 0xFFFFFFFFu;

template <typename T>
__device__ T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullWarp, value, offset);
  return value;
}

// The sum of `value` over a block of kThreads threads, in a fixed tree; every thread gets it.
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T warps[kThreads / 32];
  value = warp_sum(value);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = value;
  __syncthreads();
  T total = threadIdx.x < kThreads / 32 ? warps[threadIdx.x] : T(0);
  total = warp_sum(total);
  __syncthreads();  // warps[] may be reused by the next call
  return total;
}

__global__ void sum_squares_partial_kernel(double* partial, const float* data, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::size_t>(kSumBlocks) * kThreads) {
    sum += static_cast<double>(data[i]) * data[i];
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(double* out, const double* partial) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < kSumBlocks; i += kThreads) sum += partial[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *out = sum;
}

// partial[chunk, c] = sum of in[n, c] over the chunk's rows, in row order.
__global__ void column_chunk_kernel(float* partial, const float* in, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int n0 = blockIdx.y * kRowsPerChunk, n1 = min(N, n0 + kRowsPerChunk);
  float sum = 0.0f;
  for (int n = n0; n < n1; ++n) sum += in[static_cast<std::size_t>(n) * C + c];
  partial[static_cast<std::size_t>(blockIdx.y) * C + c] = sum;
}

// out[c] += partial[chunk, c] for chunk in order. width: partial's row length (C, or 2C for LayerNorm's pair).
__global__ void add_chunks_kernel(float* out, const float* partial, int chunks, int C, int width) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = out[c];
  for (int chunk = 0; chunk < chunks; ++chunk) sum += partial[static_cast<std::size_t>(chunk) * width + c];
  out[c] = sum;
}

// One warp per row, two passes over the row as the CPU's layernorm_forward_row (mean, then variance about it).
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* x = inp + static_cast<std::size_t>(n) * C;
  float m = 0.0f;
  for (int c = lane; c < C; c += 32) m += x[c];
  m = warp_sum(m) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
  var = warp_sum(var) / C;
  const float s = 1.0f / sqrtf(var + 1e-5f);
  float* o = out + static_cast<std::size_t>(n) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// dinp += per row (one warp each); dweight and dbias are left to layernorm_params_chunk_kernel.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int N, int C) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const std::size_t row = static_cast<std::size_t>(n) * C;
  const float mu = mean[n], s = rstd[n];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = weight[c] * dout[row + c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * ((inp[row + c] - mu) * s);
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (inp[row + c] - mu) * s;
    const float dnorm = weight[c] * dout[row + c];
    dinp[row + c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// partial[chunk, 0:C] = sum of norm * dout, partial[chunk, C:2C] = sum of dout, over the chunk's rows in order.
__global__ void layernorm_params_chunk_kernel(float* partial, const float* dout, const float* inp, const float* mean,
                                              const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int n0 = blockIdx.y * kRowsPerChunk, n1 = min(N, n0 + kRowsPerChunk);
  float dw = 0.0f, db = 0.0f;
  for (int n = n0; n < n1; ++n) {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    db += dout[i];
    dw += (inp[i] - mean[n]) * rstd[n] * dout[i];
  }
  float* p = partial + static_cast<std::size_t>(blockIdx.y) * 2 * C;
  p[c] = dw;
  p[C + c] = db;
}

// Rows per block of the one-warp-per-row kernels.
constexpr int kRowsPerBlock = kThreads / 32;

}  // namespace

void sum_squares(cudaStream_t stream, double* out, double* partial, const float* data, std::size_t n) {
  sum_squares_partial_kernel<<<kSumBlocks, kThreads, 0, stream>>>(partial, data, n);
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(out, partial);
}

void column_sums(cudaStream_t stream, float* out, float* partial, const float* in, int N, int C) {
  const int column_blocks = static_cast<int>(blocks_for(C, kThreads));
  column_chunk_kernel<<<dim3(column_blocks, row_chunks(N)), kThreads, 0, stream>>>(partial, in, N, C);
  add_chunks_kernel<<<column_blocks, kThreads, 0, stream>>>(out, partial, row_chunks(N), C, C);
}

void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  const int blocks = static_cast<int>(blocks_for(N, kRowsPerBlock));
  layernorm_forward_kernel<<<blocks, kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias, float* partial,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
  layernorm_dinp_kernel<<<static_cast<int>(blocks_for(N, kRowsPerBlock)), kThreads, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  const int column_blocks = static_cast<int>(blocks_for(C, kThreads));
  layernorm_params_chunk_kernel<<<dim3(column_blocks, row_chunks(N)), kThreads, 0, stream>>>(partial, dout, inp,
                                                                                              mean, rstd, N, C);
  add_chunks_kernel<<<column_blocks, kThreads, 0, stream>>>(dweight, partial, row_chunks(N), C, 2 * C);
  add_chunks_kernel<<<column_blocks, kThreads, 0, stream>>>(dbias, partial + C, row_chunks(N), C, 2 * C);
}

}  // namespace dtrain::trainer::kernels::cuda

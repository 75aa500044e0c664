// Fused softmax + cross-entropy of the CUDA backend (launch.h): one block per row reads the logits three times
// (max, sum of exponentials, probabilities) and writes probs and the row's loss; the mean is summed by one thread
// in position order in double, as the CPU backend does.

#include <cfloat>

#include "trainer/kernels/cuda/launch.h"
#include "trainer/kernels/cuda/shapes.h"

namespace dtrain::trainer::kernels::cuda {
namespace {

constexpr unsigned kFullWarp = 0xFFFFFFFFu;
// Threads per row: a 50257-wide row is read in 50 coalesced sweeps.
constexpr int kRowThreads = 1024;

// op-reduce of `value` over the block (kRowThreads), the same tree every time; every thread gets the result.
template <bool Max>
__device__ float block_reduce(float value) {
  __shared__ float warps[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullWarp, value, offset);
    value = Max ? fmaxf(value, other) : value + other;
  }
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = value;
  __syncthreads();
  value = warps[threadIdx.x % 32];  // kRowThreads / 32 == 32 warps: one value per lane
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullWarp, value, offset);
    value = Max ? fmaxf(value, other) : value + other;
  }
  __syncthreads();
  return value;
}

__global__ void softmax_crossentropy_kernel(float* probs, float* losses, const float* logits,
                                            const std::int32_t* targets, int V, int Vp) {
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * Vp;
  const float* x = logits + row;
  float* p = probs + row;
  float maxval = -FLT_MAX;
  for (int i = threadIdx.x; i < V; i += kRowThreads) maxval = fmaxf(maxval, x[i]);
  maxval = block_reduce<true>(maxval);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += kRowThreads) sum += expf(x[i] - maxval);
  sum = block_reduce<false>(sum);
  const float inv = 1.0f / sum;
  for (int i = threadIdx.x; i < Vp; i += kRowThreads) p[i] = i < V ? expf(x[i] - maxval) * inv : 0.0f;
  // From the logits, not from probs, so that a tiny probability keeps its precision.
  if (targets != nullptr && threadIdx.x == 0) losses[blockIdx.x] = -(x[targets[blockIdx.x]] - maxval - logf(sum));
}

__global__ void mean_kernel(float* mean, const float* losses, int N) {
  double total = 0.0;
  for (int n = 0; n < N; ++n) total += losses[n];
  *mean = static_cast<float>(total / N);
}

// d = p * dloss, minus dloss at the target: two roundings, as the CPU backend's two statements.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const std::int32_t* targets,
                                             float dloss, int N, int V, int Vp) {
  const std::size_t total = static_cast<std::size_t>(N) * Vp;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t n = i / Vp;
    const int col = static_cast<int>(i % Vp);
    float d = col < V ? __fmul_rn(probs[i], dloss) : 0.0f;
    if (col == targets[n]) d = __fadd_rn(d, -dloss);
    dlogits[i] = d;
  }
}

}  // namespace

void softmax_crossentropy_forward(cudaStream_t stream, float* probs, float* losses, float* mean,
                                  const float* logits, const std::int32_t* targets, int N, int V, int Vp) {
  softmax_crossentropy_kernel<<<N, kRowThreads, 0, stream>>>(probs, losses, logits, targets, V, Vp);
  if (targets != nullptr) mean_kernel<<<1, 1, 0, stream>>>(mean, losses, N);
}

void softmax_crossentropy_backward(cudaStream_t stream, float* dlogits, const float* probs,
                                   const std::int32_t* targets, float dloss, int N, int V, int Vp) {
  const std::size_t total = static_cast<std::size_t>(N) * Vp;
  crossentropy_backward_kernel<<<elementwise_blocks(total), kThreads, 0, stream>>>(dlogits, probs, targets, dloss, N,
                                                                                   V, Vp);
}

}  // namespace dtrain::trainer::kernels::cuda

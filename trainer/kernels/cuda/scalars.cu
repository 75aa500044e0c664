// A step's scalars on the device (launch.h): the mean of the micro-steps' losses, the gradient norm's sums and the
// clipping factor, each with the arithmetic of the host defaults in kernels/backend.h, so that a step reads nothing
// back and the bits are those of the CPU backend's path.

#include "trainer/kernels/cuda/launch.h"
#include "trainer/kernels/cuda/shapes.h"

namespace dtrain::trainer::kernels::cuda {
namespace {

__global__ void mean_of_kernel(float* out, const float* in, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += in[i];
  *out = static_cast<float>(sum / static_cast<double>(n));
}

__global__ void add_double_kernel(double* acc, const double* value) { *acc += *value; }

__global__ void split_double_kernel(float* parts, const double* value) {
  parts[0] = static_cast<float>(*value);
  parts[1] = static_cast<float>(*value - static_cast<double>(parts[0]));
}

__global__ void sum_parts_kernel(double* out, const float* parts, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += parts[i];
  *out = sum;
}

__global__ void norm_of_kernel(float* norm, const double* sum_sq) { *norm = static_cast<float>(sqrt(*sum_sq)); }

// Every thread computes the same factor from *norm, as the host computes it once.
__global__ void clip_to_kernel(float* data, std::size_t n, const float* norm, float max_norm) {
  const float coef = __fdiv_rn(max_norm, __fadd_rn(*norm, 1e-6f));
  if (!(coef < 1.0f)) return;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    data[i] = __fmul_rn(data[i], coef);
  }
}

}  // namespace

void mean_of(cudaStream_t stream, float* out, const float* in, std::size_t n) {
  mean_of_kernel<<<1, 1, 0, stream>>>(out, in, n);
}

void add_sum_squares(cudaStream_t stream, double* acc, double* sum, double* partial, const float* data,
                     std::size_t n) {
  sum_squares(stream, sum, partial, data, n);
  add_double_kernel<<<1, 1, 0, stream>>>(acc, sum);
}

void split_double(cudaStream_t stream, float* parts, const double* value) {
  split_double_kernel<<<1, 1, 0, stream>>>(parts, value);
}

void sum_parts(cudaStream_t stream, double* out, const float* parts, std::size_t n) {
  sum_parts_kernel<<<1, 1, 0, stream>>>(out, parts, n);
}

void norm_of(cudaStream_t stream, float* norm, const double* sum_sq) {
  norm_of_kernel<<<1, 1, 0, stream>>>(norm, sum_sq);
}

void clip_to(cudaStream_t stream, float* data, std::size_t n, const float* norm, float max_norm) {
  if (n == 0) return;
  clip_to_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(data, n, norm, max_norm);
}

}  // namespace dtrain::trainer::kernels::cuda

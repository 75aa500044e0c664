#pragma once

// The kernels of the CUDA backend as host functions that launch them on `stream` (asynchronously: nothing here
// waits for the GPU). Every pointer is device memory. Shapes and accumulation rules are those of the Backend
// method of the same name (trainer/kernels/backend.h); only what differs is said here. Defined in elementwise.cu,
// reduce.cu, crossentropy.cu, scalars.cu and attention.cu.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace dtrain::trainer::kernels::cuda {

// 16-bit formats as the launchers take them (kernels::Dtype without including half.h, which needs C++20).
enum class Half { bf16, fp16 };

// elementwise.cu
void embedding_forward(cudaStream_t stream, float* out, const std::int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C);
// Deterministic: each (row of wte, channel) adds the positions in order, as the CPU backend does.
void embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                        const std::int32_t* tokens, int B, int T, int C);
void gelu_forward(cudaStream_t stream, float* out, const float* inp, std::size_t n);
void gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, std::size_t n);
void residual_forward(cudaStream_t stream, float* out, const float* a, const float* b, std::size_t n);
// out (N, C) row n = bias (C) for every n.
void broadcast_rows(cudaStream_t stream, float* out, const float* bias, int N, int C);
void scale(cudaStream_t stream, float* data, std::size_t n, float factor);
// data *= factor; *flag |= 1 when an element was inf or NaN before scaling (flag is not cleared here).
void scale_and_flag(cudaStream_t stream, float* data, std::size_t n, float factor, int* flag);
// step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t), decay = 1 - lr * weight_decay, computed on the host
// as the CPU backend does.
void adamw(cudaStream_t stream, float* params, const float* grads, float* m, float* v, std::size_t n, float beta1,
           float beta2, float step_size, float bc2_sqrt, float eps, float decay);
// Rounding as kernels/half.h, bit for bit.
void to_half(cudaStream_t stream, std::uint16_t* out, const float* in, std::size_t n, Half type);
void from_half(cudaStream_t stream, float* out, const std::uint16_t* in, std::size_t n, Half type);
// out = round(float(round(in)) / divisor) (kernels/half.h's to_half_divided), the division rounded as the host's.
void to_half_divided(cudaStream_t stream, std::uint16_t* out, const float* in, std::size_t n, float divisor,
                     Half type);

// reduce.cu
// *out (one double) = sum of squares of data[0, n); partial: kSumBlocks doubles of scratch.
void sum_squares(cudaStream_t stream, double* out, double* partial, const float* data, std::size_t n);
// out (C) += column sums of in (N, C) in row chunks (shapes.h kRowsPerChunk); partial: row_chunks(N) * C floats.
void column_sums(cudaStream_t stream, float* out, float* partial, const float* in, int N, int C);
void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C);
// partial: row_chunks(N) * 2 * C floats.
void layernorm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias, float* partial,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C);

// crossentropy.cu
// probs, and losses when targets is non-null; *mean (one float on the device) = mean of losses, summed in
// position order in double.
void softmax_crossentropy_forward(cudaStream_t stream, float* probs, float* losses, float* mean,
                                  const float* logits, const std::int32_t* targets, int N, int V, int Vp);
void softmax_crossentropy_backward(cudaStream_t stream, float* dlogits, const float* probs,
                                   const std::int32_t* targets, float dloss, int N, int V, int Vp);

// scalars.cu: the step's scalars of kernels/backend.h, one thread each except clip_to.
void mean_of(cudaStream_t stream, float* out, const float* in, std::size_t n);
// *acc += sum of squares of data[0, n); sum: one double of scratch, partial: kSumBlocks doubles.
void add_sum_squares(cudaStream_t stream, double* acc, double* sum, double* partial, const float* data,
                     std::size_t n);
void split_double(cudaStream_t stream, float* parts, const double* value);
void sum_parts(cudaStream_t stream, double* out, const float* parts, std::size_t n);
void norm_of(cudaStream_t stream, float* norm, const double* sum_sq);
void clip_to(cudaStream_t stream, float* data, std::size_t n, const float* norm, float max_norm);

// attention.cu: flash-attention style, no T x T matrix. lse (B, NH, T) = log of each row's softmax denominator
// (with its max), written by the forward and read by the backward, which recomputes the probabilities from it.
// scratch: attention_scratch_floats(B, T, NH).
void attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
void attention_backward(cudaStream_t stream, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* lse, int B, int T, int C, int NH);

}  // namespace dtrain::trainer::kernels::cuda

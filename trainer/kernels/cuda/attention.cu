// Fused causal self-attention of the CUDA backend (launch.h), flash-attention style: the T x T matrix is never
// stored. A block holds kAttentionRows rows (one warp each) of one (batch, head); keys stream through shared
// memory kAttentionKeys at a time, lane j scoring key j of the tile, and each row keeps a running max and
// denominator (online softmax). The forward keeps lse = max + log(denominator) per row; the backward recomputes
// the probabilities exp(score - lse) in two kernels, so neither needs atomics:
//   rows kernel   per query row t: D_t = sum_s P_ts (dout_t . v_s), then dq_t = scale sum_s P_ts (dP_ts - D_t) k_s
//   keys kernel   per key row s:   dv_s = sum_t P_ts dout_t, dk_s = scale sum_t P_ts (dP_ts - D_t) q_t
// with dP_ts = dout_t . v_s. D_t (the softmax backward's row dot, dout_t . out_t) goes through the scratch.
// Shared rows read by every lane at once are padded by one float so that lanes hit different banks.

#include <cfloat>

#include "trainer/kernels/cuda/launch.h"
#include "trainer/kernels/cuda/shapes.h"

namespace dtrain::trainer::kernels::cuda {
namespace {

constexpr unsigned kFullWarp = 0xFFFFFFFFu;
constexpr int kDimsPerLane = kMaxHeadSize / 32;
constexpr int kPadded = kMaxHeadSize + 1;
constexpr int kBlockThreads = kAttentionRows * 32;

__device__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, offset));
  return value;
}

__device__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullWarp, value, offset);
  return value;
}

// dst[r][d] = src row (first + r), d < hs, for `rows` rows `stride` floats apart; zeros past T.
template <int Width>
__device__ void load_rows(float (*dst)[Width], const float* src, int first, int rows, int T, int hs,
                          std::size_t stride) {
  for (int i = threadIdx.x; i < rows * hs; i += kBlockThreads) {
    const int r = i / hs, d = i % hs;
    dst[r][d] = first + r < T ? src[static_cast<std::size_t>(first + r) * stride + d] : 0.0f;
  }
}

__device__ float dot(const float* a, const float* b, int hs) {
  float sum = 0.0f;
  for (int d = 0; d < hs; ++d) sum += a[d] * b[d];
  return sum;
}

// This block's (batch, head) and rows, and this thread's place in it.
struct Block {
  std::size_t qkv;  // q of position 0; k at +C, v at +2C; positions 3C apart
  std::size_t out;  // out (and dout) of position 0; positions C apart
  std::size_t row;  // lse / D of position 0
  int hs, warp, lane;
  int first;        // the block's first row (query rows, or key rows in the keys kernel)
  int mine;         // this warp's row: first + warp
};

__device__ Block this_block(int T, int C, int NH) {
  const int b = blockIdx.z, h = blockIdx.y, hs = C / NH, warp = threadIdx.x / 32;
  const int first = blockIdx.x * kAttentionRows;
  return {static_cast<std::size_t>(b) * T * 3 * C + h * hs, static_cast<std::size_t>(b) * T * C + h * hs,
          (static_cast<std::size_t>(b) * NH + h) * T, hs, warp, static_cast<int>(threadIdx.x % 32), first,
          first + warp};
}

// Keys and values s0 .. s0 + kAttentionKeys - 1 into shared memory, once every warp is done with the last tile.
template <int KWidth, int VWidth>
__device__ void next_key_tile(float (*k_s)[KWidth], float (*v_s)[VWidth], const float* qkv, const Block& block,
                              int s0, int T, int C) {
  __syncthreads();
  load_rows(k_s, qkv + block.qkv + C, s0, kAttentionKeys, T, block.hs, 3 * C);
  load_rows(v_s, qkv + block.qkv + 2 * C, s0, kAttentionKeys, T, block.hs, 3 * C);
  __syncthreads();
}

__global__ void __launch_bounds__(kBlockThreads)
attention_forward_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH, float scale) {
  __shared__ float q_s[kAttentionRows][kMaxHeadSize];
  __shared__ float k_s[kAttentionKeys][kPadded];
  __shared__ float v_s[kAttentionKeys][kMaxHeadSize];
  const Block block = this_block(T, C, NH);
  const int hs = block.hs, warp = block.warp, lane = block.lane, t0 = block.first, t = block.mine;
  load_rows(q_s, qkv + block.qkv, t0, kAttentionRows, T, hs, 3 * C);
  float m = -FLT_MAX, l = 0.0f, acc[kDimsPerLane] = {};
  for (int tile = 0; tile < attention_key_tiles(t0, T); ++tile) {
    const int s0 = tile * kAttentionKeys, s = s0 + lane;
    next_key_tile(k_s, v_s, qkv, block, s0, T, C);
    if (t >= T || s0 > t) continue;  // the whole warp: t is the warp's row
    const bool seen = s <= t;
    const float score = seen ? dot(q_s[warp], k_s[lane], hs) * scale : -FLT_MAX;
    const float m_new = fmaxf(m, warp_max(score));
    const float p = seen ? expf(score - m_new) : 0.0f;
    const float correction = expf(m - m_new);
    l = l * correction + warp_sum(p);
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= correction;
    for (int j = 0; j < kAttentionKeys; ++j) {
      const float pj = __shfl_sync(kFullWarp, p, j);
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < hs) acc[i] += pj * v_s[j][d];
      }
    }
    m = m_new;
  }
  if (t >= T) return;
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hs) out[block.out + static_cast<std::size_t>(t) * C + d] = acc[i] / l;
  }
  if (lane == 0) lse[block.row + t] = m + logf(l);
}

__global__ void __launch_bounds__(kBlockThreads)
attention_rows_backward_kernel(float* dqkv, float* row_dot, const float* dout, const float* qkv, const float* lse,
                               int T, int C, int NH, float scale) {
  __shared__ float q_s[kAttentionRows][kMaxHeadSize];
  __shared__ float do_s[kAttentionRows][kMaxHeadSize];
  __shared__ float k_s[kAttentionKeys][kPadded];
  __shared__ float v_s[kAttentionKeys][kPadded];
  const Block block = this_block(T, C, NH);
  const int hs = block.hs, warp = block.warp, lane = block.lane, t0 = block.first, t = block.mine;
  load_rows(q_s, qkv + block.qkv, t0, kAttentionRows, T, hs, 3 * C);
  load_rows(do_s, dout + block.out, t0, kAttentionRows, T, hs, C);
  const float L = t < T ? lse[block.row + t] : 0.0f;
  float D = 0.0f, acc[kDimsPerLane] = {};
  // pass 0 sums D over every key; pass 1, with D known, accumulates dq.
  for (int pass = 0; pass < 2; ++pass) {
    for (int tile = 0; tile < attention_key_tiles(t0, T); ++tile) {
      const int s0 = tile * kAttentionKeys, s = s0 + lane;
      next_key_tile(k_s, v_s, qkv, block, s0, T, C);
      if (t >= T || s0 > t) continue;
      const bool seen = s <= t;
      const float p = seen ? expf(dot(q_s[warp], k_s[lane], hs) * scale - L) : 0.0f;
      const float dp = seen ? dot(do_s[warp], v_s[lane], hs) : 0.0f;
      if (pass == 0) {
        D += p * dp;
        continue;
      }
      const float ds = p * (dp - D);
      for (int j = 0; j < kAttentionKeys; ++j) {
        const float dsj = __shfl_sync(kFullWarp, ds, j);
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) acc[i] += dsj * k_s[j][d];
        }
      }
    }
    if (pass == 0) D = warp_sum(D);
  }
  if (t >= T) return;
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hs) dqkv[block.qkv + static_cast<std::size_t>(t) * 3 * C + d] = acc[i] * scale;
  }
  if (lane == 0) row_dot[block.row + t] = D;
}

__global__ void __launch_bounds__(kBlockThreads)
attention_keys_backward_kernel(float* dqkv, const float* row_dot, const float* dout, const float* qkv,
                               const float* lse, int T, int C, int NH, float scale) {
  __shared__ float k_s[kAttentionRows][kMaxHeadSize];
  __shared__ float v_s[kAttentionRows][kMaxHeadSize];
  __shared__ float q_s[kAttentionKeys][kPadded];
  __shared__ float do_s[kAttentionKeys][kPadded];
  const Block block = this_block(T, C, NH);  // its rows are keys here: queries t >= s see them
  const int hs = block.hs, warp = block.warp, lane = block.lane, s0 = block.first, s = block.mine;
  load_rows(k_s, qkv + block.qkv + C, s0, kAttentionRows, T, hs, 3 * C);
  load_rows(v_s, qkv + block.qkv + 2 * C, s0, kAttentionRows, T, hs, 3 * C);
  float dk[kDimsPerLane] = {}, dv[kDimsPerLane] = {};
  const int tiles = static_cast<int>(blocks_for(static_cast<std::size_t>(T), kAttentionKeys));
  for (int tile = s0 / kAttentionKeys; tile < tiles; ++tile) {
    const int q0 = tile * kAttentionKeys, t = q0 + lane;
    __syncthreads();
    load_rows(q_s, qkv + block.qkv, q0, kAttentionKeys, T, hs, 3 * C);
    load_rows(do_s, dout + block.out, q0, kAttentionKeys, T, hs, C);
    __syncthreads();
    if (s >= T || q0 + kAttentionKeys <= s) continue;  // the whole warp: no query of this tile sees key s
    const bool seen = t < T && t >= s;
    const float p = seen ? expf(dot(q_s[lane], k_s[warp], hs) * scale - lse[block.row + t]) : 0.0f;
    const float dp = seen ? dot(do_s[lane], v_s[warp], hs) : 0.0f;
    const float ds = seen ? p * (dp - row_dot[block.row + t]) : 0.0f;
    for (int j = 0; j < kAttentionKeys; ++j) {
      const float pj = __shfl_sync(kFullWarp, p, j), dsj = __shfl_sync(kFullWarp, ds, j);
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < hs) {
          dv[i] += pj * do_s[j][d];
          dk[i] += dsj * q_s[j][d];
        }
      }
    }
  }
  if (s >= T) return;
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hs) {
      dqkv[block.qkv + static_cast<std::size_t>(s) * 3 * C + C + d] = dk[i] * scale;
      dqkv[block.qkv + static_cast<std::size_t>(s) * 3 * C + 2 * C + d] = dv[i];
    }
  }
}

dim3 attention_grid(int B, int T, int NH) { return dim3(attention_row_blocks(T), NH, B); }

}  // namespace

void attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int hs = attention_head_size(C, NH);
  attention_forward_kernel<<<attention_grid(B, T, NH), kBlockThreads, 0, stream>>>(out, lse, qkv, T, C, NH,
                                                                                   1.0f / sqrtf(float(hs)));
}

void attention_backward(cudaStream_t stream, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* lse, int B, int T, int C, int NH) {
  const int hs = attention_head_size(C, NH);
  const float scale = 1.0f / sqrtf(float(hs));
  attention_rows_backward_kernel<<<attention_grid(B, T, NH), kBlockThreads, 0, stream>>>(dqkv, scratch, dout, qkv,
                                                                                         lse, T, C, NH, scale);
  attention_keys_backward_kernel<<<attention_grid(B, T, NH), kBlockThreads, 0, stream>>>(dqkv, scratch, dout, qkv,
                                                                                         lse, T, C, NH, scale);
}

}  // namespace dtrain::trainer::kernels::cuda

#pragma once

// The launch arithmetic of the CUDA kernels, host-only and header-only so that it is unit-tested without a GPU
// (tests/unit/kernels_cuda_shapes_test.cpp) and shared by the .cu files and the backend.

#include <cstddef>
#include <stdexcept>
#include <string>

namespace dtrain::trainer::kernels::cuda {

// Threads per block of the elementwise kernels: a multiple of the warp that keeps several blocks per SM.
constexpr int kThreads = 256;
// Elementwise grids are capped (the kernels stride over the rest) so a 124M-element AdamW is not 500k blocks.
constexpr int kMaxBlocks = 65535;

// ceil(n / per): blocks that cover n items, per to a block.
constexpr std::size_t blocks_for(std::size_t n, std::size_t per) { return (n + per - 1) / per; }

// Blocks of kThreads for n elements, at least 1 (a launch with 0 blocks is an error), at most kMaxBlocks.
constexpr int elementwise_blocks(std::size_t n) {
  const std::size_t blocks = blocks_for(n, kThreads);
  return blocks == 0 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : static_cast<int>(blocks));
}

// Column sums over rows (dbias, LayerNorm's dweight and dbias) go in chunks of this many rows: each chunk's sum is
// kept and the chunks are added in order, as the CPU backend does (its kRowsPerChunk), so the result is the same
// run after run and does not depend on the GPU's scheduling.
constexpr int kRowsPerChunk = 32;
constexpr int row_chunks(int N) { return static_cast<int>(blocks_for(static_cast<std::size_t>(N), kRowsPerChunk)); }

// sum_squares: a fixed number of blocks (not one per SM count) so that the partial sums, and with them the result's
// bits, are the same on every GPU.
constexpr int kSumBlocks = 256;

// Attention (attention.cu): a block is kAttentionRows query rows (one warp each), keys stream through shared memory
// kAttentionKeys at a time (one per lane), and a lane holds head dimensions lane, lane + 32, ... so a head is at
// most kMaxHeadSize wide.
constexpr int kAttentionRows = 8;
constexpr int kAttentionKeys = 32;
constexpr int kMaxHeadSize = 128;

// Blocks along T for a sequence of T positions.
constexpr int attention_row_blocks(int T) {
  return static_cast<int>(blocks_for(static_cast<std::size_t>(T), kAttentionRows));
}

// Key tiles a block whose first row is t0 reads: rows t0 .. t0 + kAttentionRows - 1 see keys 0 .. their own
// position (causal), so tiles up to the last row's; never past T.
constexpr int attention_key_tiles(int t0, int T) {
  const int last = (t0 + kAttentionRows < T ? t0 + kAttentionRows : T) - 1;
  return last / kAttentionKeys + 1;
}

// The backward's scratch: one float per (batch, head, position), the row sums D_t = dout_t . out_t.
constexpr std::size_t attention_scratch_floats(int B, int T, int NH) {
  return static_cast<std::size_t>(B) * NH * T;
}

// The head size C / NH, or std::invalid_argument naming the shape when the kernels cannot take it.
inline int attention_head_size(int C, int NH) {
  if (NH <= 0 || C % NH != 0) {
    throw std::invalid_argument("cuda attention: C = " + std::to_string(C) + " is not a multiple of NH = " +
                                std::to_string(NH));
  }
  const int hs = C / NH;
  if (hs > kMaxHeadSize) {
    throw std::invalid_argument("cuda attention: head size " + std::to_string(hs) + " (C / NH) is over the " +
                                std::to_string(kMaxHeadSize) + " the kernels hold per warp; use more heads");
  }
  return hs;
}

}  // namespace dtrain::trainer::kernels::cuda

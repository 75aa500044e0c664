#pragma once

// ZeRO sharding of the flat parameter buffer (ZeRO paper, arXiv:1910.02054; PyTorch FSDP's flat parameters).
// The buffer is cut into units (trainer/model/layout.h: wte + wpe, each layer, the final LayerNorm), each unit's
// slice padded to a multiple of the world size W and split into W equal shards; rank r owns shard r of every unit:
//   unit u:  | shard 0 (rank 0) | shard 1 (rank 1) | ... | shard W-1 (rank W-1, padding at its end) |
// Stage 1 shards AdamW's m and v, stage 2 also the gradients, stage 3 also the parameters. A rank's optimizer
// state is its shards of every unit, concatenated in unit order (ShardSpan::state_offset).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainer/model/layout.h"

namespace dtrain::trainer {

// One rank's shard of one unit: where it lies in the flat buffer and where its optimizer state starts.
struct ShardSpan {
  std::size_t offset = 0;        // first float in the flat buffer
  std::size_t count = 0;         // floats (the unit's slice / W; padding included)
  std::size_t state_offset = 0;  // first float in this rank's optimizer state
};

class ZeroShards {
 public:
  // layout: the model's, padded for `world` ranks (ParamLayout(config, world)). Throws std::invalid_argument when
  // the layout's unit multiple is not `world` or rank is outside [0, world).
  ZeroShards(const ParamLayout& layout, int rank, int world);

  int rank() const { return rank_; }
  int world() const { return world_; }
  int num_units() const { return static_cast<int>(slices_.size()); }
  // Unit u's slice of the flat buffer (padding included; a multiple of world()).
  ParamRange slice(int u) const { return slices_[u]; }
  // This rank's shard of unit u.
  const ShardSpan& owned(int u) const { return owned_[u]; }
  const std::vector<ShardSpan>& owned() const { return owned_; }
  // P: the padded parameter count (the flat buffer's size).
  std::size_t padded_params() const { return padded_; }
  // P / W: the floats of this rank's shards together (its optimizer state's size).
  std::size_t shard_params() const { return padded_ / static_cast<std::size_t>(world_); }

 private:
  int rank_;
  int world_;
  std::vector<ParamRange> slices_;
  std::vector<ShardSpan> owned_;
  std::size_t padded_ = 0;
};

// What one rank holds in steady state, in bytes, fp32 (README, "--zero"): P = padded parameter count, W ranks.
//   stage 0: params 4P, grads 4P, optimizer (m, v) 8P     stage 2: 4P, 4P/W, 8P/W
//   stage 1: 4P, 4P, 8P/W                                 stage 3: 4P/W, 4P/W, 8P/W
struct ZeroMemory {
  std::uint64_t params = 0;
  std::uint64_t grads = 0;
  std::uint64_t optim = 0;
};
ZeroMemory zero_memory(int stage, std::size_t padded_params, int world);

// The same with a 16-bit precision (README, "--precision"), in the ZeRO paper's accounting: params = the 16-bit
// working copy, 2P (stage 3: 2P/W); optimizer = fp32 master + m + v. Two departures from the paper, both what a rank
// really holds: gradients stay fp32 (4P, or 4P/W from stage 2; backward accumulates in fp32 and --reduce-dtype only
// changes what crosses the wire), and with the master sharded at stages 1-2 the tensors fp32 kernels read
// (Gpt::fp32_tensors: embeddings, LayerNorms, biases; `widened` values) are kept widened from the working copy, 4
// bytes each on top of params.
//   master_sharded (--param-dtype = the precision):  stage 1: 2P + 4F, 4P, 12P/W   stage 2: 2P + 4F, 4P/W, 12P/W
//   master whole (--param-dtype fp32):               stage 1: 2P, 4P, 4P + 8P/W    stage 2: 2P, 4P/W, 4P + 8P/W
//   stage 3 either way: 2P/W, 4P/W, 12P/W (gathered units count in mem_gathered_peak_bytes)
ZeroMemory mixed_zero_memory(int stage, std::size_t padded_params, int world, bool master_sharded,
                             std::size_t widened);

// Bytes one rank sends for a reduce-scatter or an all-gather of `count` elements in all (W shards of count / W), as
// a ring does it: W - 1 shards. (An allreduce is one of each.) Elements are floats unless element_bytes says
// otherwise (2: ZeRO-3's 16-bit parameters).
std::uint64_t ring_bytes_sent(std::size_t count, int world, std::size_t element_bytes = sizeof(float));

}  // namespace dtrain::trainer

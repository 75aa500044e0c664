#pragma once

// Which tokens each rank trains on, step by step: llm.c's DataLoader without shuffling, made exact for any mix of
// ranks and gradient-accumulation micro-steps.
//
// Shards are the files matching --data, in sorted name order. Let B = batch size per rank and micro-step, T =
// sequence length, W = world size, K = micro-steps per optimizer step; one optimizer step consumes S = B*T*W*K
// tokens. A shard of n tokens holds c = floor((n - 1) / S) whole steps; the tokens after them are not used, so a
// step never straddles two shards. Steps run through the shards in order, then wrap back to the first (the next
// epoch). For step s, let j be its index within its shard; micro-step m of rank r reads the B*T + 1 tokens
// starting at shard offset
//     ((j*K + m) * W + r) * B*T          (inputs: the first B*T, targets: the B*T after the first)
// which is llm.c's (g*W + r)*B*T with global micro-step g = s*K + m while the data stays in one shard. Because the
// rule depends only on B*W*K (the global batch) and on B*T blocks, 2 ranks x B/2 and 2 micro-steps x B/2 read
// exactly the rows of 1 rank x B, so their losses can be compared step for step. A shard with fewer than S + 1
// tokens holds no step and is skipped (skipped() lists it).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/shard.h"

namespace dtrain::trainer {

struct DataLoaderOptions {
  std::string pattern;       // glob of shard files (--data); matches are read in sorted order
  int batch_size = 1;        // B: sequences per rank per micro-step
  int seq_len = 1;           // T: tokens per sequence
  int rank = 0;              // r: this process's rank
  int world_size = 1;        // W: ranks in the job
  int grad_accum = 1;        // K: micro-steps per optimizer step
  int vocab_size = 0;        // tokens must be below this (0: not checked)
};

// Where one rank's micro-batch starts.
struct DataLocation {
  std::size_t shard = 0;   // index into shards()
  std::size_t offset = 0;  // first token within that shard
};

class DataLoader {
 public:
  // Opens every shard; throws DataError if the glob matches nothing, a shard is invalid, or no shard is large
  // enough for one step.
  explicit DataLoader(DataLoaderOptions options);

  const DataLoaderOptions& options() const { return options_; }
  const std::vector<Shard>& shards() const { return shards_; }
  // Paths of shards that hold fewer than S + 1 tokens (not used).
  const std::vector<std::string>& skipped() const { return skipped_; }
  // Optimizer steps in one pass over all shards.
  std::uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Tokens one micro-batch reads: B*T + 1.
  std::size_t batch_tokens() const;

  DataLocation locate(std::uint64_t step, int micro_step) const;
  // out receives batch_tokens() tokens of (step, micro_step) for this rank. Throws DataError on a read error or a
  // token outside the vocabulary.
  void read(std::uint64_t step, int micro_step, std::int32_t* out) const;

 private:
  DataLoaderOptions options_;
  std::vector<Shard> shards_;             // only the shards that hold at least one step
  std::vector<std::uint64_t> first_step_; // first_step_[i]: index within the epoch of shards_[i]'s first step
  std::vector<std::string> skipped_;
  std::uint64_t steps_per_epoch_ = 0;
};

}  // namespace dtrain::trainer

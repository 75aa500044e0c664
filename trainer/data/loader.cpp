#include "trainer/data/loader.h"

#include <glob.h>

#include <algorithm>
#include <utility>

namespace dtrain::trainer {
namespace {

std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t matches{};
  int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
    throw DataError("--data " + pattern + ": no file matches; give a path or glob of llm.c token shards (make one "
                    "from text with `dtrain-trainer prepare-text IN.txt OUT.bin`)");
  }
  if (rc != 0) throw DataError("--data " + pattern + ": cannot expand the glob (a directory is unreadable)");
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

DataLoader::DataLoader(DataLoaderOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  if (o.batch_size < 1 || o.seq_len < 1 || o.world_size < 1 || o.grad_accum < 1 || o.rank < 0 ||
      o.rank >= o.world_size) {
    throw DataError("data loader: batch size, sequence length, world size and micro-steps must be >= 1 and the "
                    "rank below the world size");
  }
  std::size_t step_tokens = static_cast<std::size_t>(o.batch_size) * o.seq_len * o.world_size * o.grad_accum;
  std::size_t largest = 0;
  for (const std::string& path : glob_paths(o.pattern)) {
    Shard shard(path);
    largest = std::max(largest, shard.tokens());
    std::uint64_t steps = (shard.tokens() - 1) / step_tokens;
    if (steps == 0) {
      skipped_.push_back(path);
      continue;
    }
    first_step_.push_back(steps_per_epoch_);
    steps_per_epoch_ += steps;
    shards_.push_back(std::move(shard));
  }
  if (shards_.empty()) {
    throw DataError("--data " + o.pattern + ": the largest shard has " + std::to_string(largest) +
                    " tokens, but one step needs batch size x seq len x world size x grad accum + 1 = " +
                    std::to_string(step_tokens + 1) + "; use more data or a smaller --batch-size/--seq-len");
  }
}

std::size_t DataLoader::batch_tokens() const {
  return static_cast<std::size_t>(options_.batch_size) * options_.seq_len + 1;
}

DataLocation DataLoader::locate(std::uint64_t step, int micro_step) const {
  const auto& o = options_;
  std::uint64_t in_epoch = step % steps_per_epoch_;
  // The last shard whose first step is <= in_epoch.
  auto it = std::upper_bound(first_step_.begin(), first_step_.end(), in_epoch);
  std::size_t shard = static_cast<std::size_t>(it - first_step_.begin()) - 1;
  std::uint64_t j = in_epoch - first_step_[shard];
  std::uint64_t block = (j * o.grad_accum + static_cast<std::uint64_t>(micro_step)) * o.world_size + o.rank;
  return {shard, static_cast<std::size_t>(block * o.batch_size * o.seq_len)};
}

void DataLoader::read(std::uint64_t step, int micro_step, std::int32_t* out) const {
  if (micro_step < 0 || micro_step >= options_.grad_accum) {
    throw DataError("data loader: micro-step " + std::to_string(micro_step) + " outside 0 .. grad accum - 1");
  }
  DataLocation at = locate(step, micro_step);
  const Shard& shard = shards_[at.shard];
  std::size_t count = batch_tokens();
  shard.read(at.offset, count, out);
  if (options_.vocab_size > 0) {
    for (std::size_t i = 0; i < count; ++i) {
      if (out[i] >= options_.vocab_size) {
        throw DataError("data shard " + shard.path() + ": token " + std::to_string(out[i]) + " at position " +
                        std::to_string(at.offset + i) + " is outside the model's vocabulary of " +
                        std::to_string(options_.vocab_size) + "; use --vocab (or a --model) that covers the data's "
                        "tokenizer (prepare-text shards need 256)");
      }
    }
  }
}

}  // namespace dtrain::trainer

// Fuzz target: an llm.c token shard as dtrain-trainer's --data reads it: the header checks at open, every token
// read back, then a DataLoader over it (batch, sequence, world, micro-steps and vocabulary from the input's first
// 4 bytes) serving its first steps. Any input must end in data or a DataError.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "trainer/data/loader.h"
#include "trainer/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain::trainer;
  if (size < 4) return 0;
  DataLoaderOptions options;
  options.batch_size = 1 + data[0] % 4;
  options.seq_len = 1 + data[1] % 8;
  options.world_size = 1 + data[2] % 3;
  options.rank = (data[2] / 3) % options.world_size;
  options.grad_accum = 1 + data[3] % 3;
  options.vocab_size = data[3] & 0x80 ? 256 : 0;
  const dtrain::fuzz::MemFile file(data + 4, size - 4);
  options.pattern = file.path();
  try {
    const Shard shard(file.path());
    std::vector<std::int32_t> tokens(4096);
    for (std::size_t at = 0; at < shard.tokens(); at += tokens.size()) {
      const std::size_t count = std::min(tokens.size(), shard.tokens() - at);
      shard.read(at, count, tokens.data());
    }
    const DataLoader loader(options);
    std::vector<std::int32_t> batch(loader.batch_tokens());
    for (std::uint64_t step = 0; step < 3; ++step) {
      for (int micro = 0; micro < options.grad_accum; ++micro) loader.read(step, micro, batch.data());
    }
  } catch (const DataError&) {
  }
  return 0;
}

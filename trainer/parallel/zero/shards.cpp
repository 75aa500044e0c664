#include "trainer/parallel/zero/shards.h"

#include <stdexcept>
#include <string>

namespace dtrain::trainer {

ZeroShards::ZeroShards(const ParamLayout& layout, int rank, int world) : rank_(rank), world_(world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("ZeroShards: rank " + std::to_string(rank) + " is outside [0, " +
                                std::to_string(world) + "); RANK and WORLD_SIZE must agree");
  if (layout.unit_multiple() != world)
    throw std::invalid_argument("ZeroShards: the layout pads units to a multiple of " +
                                std::to_string(layout.unit_multiple()) + ", not of the world size " +
                                std::to_string(world) + "; build the model with ParamLayout(config, world)");
  std::size_t state = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const ParamRange slice = layout.unit_slice(u);
    const std::size_t shard = slice.count / static_cast<std::size_t>(world);
    slices_.push_back(slice);
    owned_.push_back({slice.offset + static_cast<std::size_t>(rank) * shard, shard, state});
    state += shard;
    padded_ += slice.count;
  }
}

ZeroMemory zero_memory(int stage, std::size_t padded_params, int world) {
  if (stage < 0 || stage > 3 || world < 1)
    throw std::invalid_argument("zero_memory: stage " + std::to_string(stage) + " on " + std::to_string(world) +
                                " ranks; the stage is 0..3 and the world at least 1");
  const std::uint64_t full = 4 * static_cast<std::uint64_t>(padded_params);
  const std::uint64_t shard = full / static_cast<std::uint64_t>(world);
  ZeroMemory m;
  m.params = stage == 3 ? shard : full;
  m.grads = stage >= 2 ? shard : full;
  m.optim = stage >= 1 ? 2 * shard : 2 * full;
  return m;
}

ZeroMemory mixed_zero_memory(int stage, std::size_t padded_params, int world, bool master_sharded,
                             std::size_t widened) {
  if (stage < 1 || stage > 3 || world < 1)
    throw std::invalid_argument("mixed_zero_memory: stage " + std::to_string(stage) + " on " +
                                std::to_string(world) + " ranks; the stage is 1..3 and the world at least 1");
  const std::uint64_t P = padded_params;
  const std::uint64_t W = static_cast<std::uint64_t>(world);
  const bool sharded = master_sharded || stage == 3;
  ZeroMemory m;
  m.params = stage == 3 ? 2 * P / W : 2 * P + (sharded ? 4 * static_cast<std::uint64_t>(widened) : 0);
  m.grads = stage >= 2 ? 4 * P / W : 4 * P;
  m.optim = (sharded ? 4 * P / W : 4 * P) + 8 * P / W;
  return m;
}

std::uint64_t ring_bytes_sent(std::size_t count, int world, std::size_t element_bytes) {
  const std::uint64_t shard = count / static_cast<std::size_t>(world);
  return shard * static_cast<std::uint64_t>(world - 1) * element_bytes;
}

}  // namespace dtrain::trainer

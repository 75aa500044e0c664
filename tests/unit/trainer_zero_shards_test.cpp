// ZeRO units and shards (trainer/parallel/zero/shards.h) on the padded layout (trainer/model/layout.h), the memory
// formulas, and releasing pages (pages.h). Pure: no communication.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "small_gpt_config.h"
#include "trainer/model/layout.h"
#include "trainer/parallel/zero/pages.h"
#include "trainer/parallel/zero/shards.h"

using dtrain::trainer::ParamLayout;
using dtrain::trainer::ParamRange;
using dtrain::trainer::ZeroShards;

TEST_CASE("units: embeddings, one per layer, the final LayerNorm; each padded to a multiple of W") {
  const auto config = small_gpt_config();
  const ParamLayout plain(config);
  for (int world : {1, 2, 3, 4, 7}) {
    CAPTURE(world);
    const ParamLayout layout(config, world);
    CHECK(layout.num_units() == config.num_layers + 2);
    CHECK(layout.num_params() == plain.num_params());
    std::size_t end = 0, params = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      const ParamRange slice = layout.unit_slice(u);
      CHECK(slice.offset == end);
      CHECK(slice.count % static_cast<std::size_t>(world) == 0);
      CHECK(slice.count - layout.unit_params(u) < static_cast<std::size_t>(world));
      end += slice.count;
      params += layout.unit_params(u);
    }
    CHECK(end == layout.buffer_size());
    CHECK(params == layout.num_params());
    CHECK(layout.unit_params(0) == layout.wte().count + layout.wpe().count);
    CHECK(layout.unit_slice(1).offset == layout.layer(0).offset);
    CHECK(layout.unit_slice(layout.num_units() - 1).offset == layout.lnfw().offset);
    // Every tensor lies inside its unit's parameters, before the padding.
    for (const auto& t : layout.checkpoint_tensors()) {
      const int u = t.layer >= 0 ? 1 + t.layer : (t.name == "lnfw" || t.name == "lnfb" ? layout.num_units() - 1 : 0);
      const ParamRange slice = layout.unit_slice(u);
      CHECK(t.offset >= slice.offset);
      CHECK(t.offset + t.count <= slice.offset + layout.unit_params(u));
    }
  }
  CHECK(ParamLayout(config, 1).buffer_size() == plain.num_params());
  CHECK_THROWS_AS(ParamLayout(config, 0), std::invalid_argument);
}

TEST_CASE("pack and unpack convert between the padded buffer and the unpadded one; checkpoint order agrees") {
  const auto config = small_gpt_config();
  const ParamLayout plain(config), padded(config, 3);
  std::vector<float> packed(plain.num_params());
  std::iota(packed.begin(), packed.end(), 1.0f);
  std::vector<float> buffer(padded.buffer_size(), -1.0f), back(plain.num_params());
  padded.unpack(packed.data(), buffer.data());
  padded.pack(buffer.data(), back.data());
  CHECK(back == packed);
  for (int u = 0; u < padded.num_units(); ++u) {
    const ParamRange s = padded.unit_slice(u);
    for (std::size_t i = padded.unit_params(u); i < s.count; ++i) CHECK(buffer[s.offset + i] == 0.0f);
  }
  std::vector<float> ckpt_plain(plain.num_params()), ckpt_padded(plain.num_params());
  plain.to_checkpoint_order(packed.data(), ckpt_plain.data());
  padded.to_checkpoint_order(buffer.data(), ckpt_padded.data());
  CHECK(ckpt_plain == ckpt_padded);
}

TEST_CASE("rank r owns shard r of every unit; the shards of all ranks tile the buffer; state is concatenated") {
  const auto config = small_gpt_config();
  const int world = 4;
  const ParamLayout layout(config, world);
  std::vector<int> owner(layout.buffer_size(), -1);
  for (int rank = 0; rank < world; ++rank) {
    const ZeroShards shards(layout, rank, world);
    CHECK(shards.padded_params() == layout.buffer_size());
    CHECK(shards.shard_params() * world == layout.buffer_size());
    std::size_t state = 0;
    for (int u = 0; u < shards.num_units(); ++u) {
      const auto& own = shards.owned(u);
      CHECK(own.count * world == shards.slice(u).count);
      CHECK(own.offset == shards.slice(u).offset + rank * own.count);
      CHECK(own.state_offset == state);
      state += own.count;
      for (std::size_t i = 0; i < own.count; ++i) {
        CHECK(owner[own.offset + i] == -1);
        owner[own.offset + i] = rank;
      }
    }
    CHECK(state == shards.shard_params());
  }
  CHECK(std::none_of(owner.begin(), owner.end(), [](int r) { return r < 0; }));
  CHECK_THROWS_AS(ZeroShards(layout, 4, world), std::invalid_argument);
  CHECK_THROWS_AS(ZeroShards(ParamLayout(config, 2), 0, world), std::invalid_argument);
}

TEST_CASE("memory formulas (fp32): 16P at stage 0, 4P + 4P + 8P/W, 4P + 12P/W, 16P/W") {
  using dtrain::trainer::zero_memory;
  const std::size_t P = 1000;
  const auto total = [](dtrain::trainer::ZeroMemory m) { return m.params + m.grads + m.optim; };
  CHECK(total(zero_memory(0, P, 4)) == 16 * P);
  CHECK(zero_memory(1, P, 4).params == 4 * P);
  CHECK(zero_memory(1, P, 4).grads == 4 * P);
  CHECK(zero_memory(1, P, 4).optim == 8 * P / 4);
  CHECK(total(zero_memory(2, P, 4)) == 4 * P + 12 * P / 4);
  CHECK(total(zero_memory(3, P, 4)) == 16 * P / 4);
  CHECK(zero_memory(3, P, 4).params == 4 * P / 4);
  CHECK_THROWS_AS(zero_memory(4, P, 4), std::invalid_argument);
  CHECK(dtrain::trainer::ring_bytes_sent(P, 4) == 3 * (P / 4) * sizeof(float));
  CHECK(dtrain::trainer::ring_bytes_sent(P, 1) == 0);
}

TEST_CASE("release_outside zeroes what it releases and keeps the rest, across page boundaries") {
  const std::size_t n = 5 * 4096 + 123;
  std::vector<float> data(n, 7.0f);
  const std::size_t keep_begin = 1500, keep_end = 9000;
  dtrain::trainer::release_outside(data.data(), 10, n - 5, keep_begin, keep_end);
  for (std::size_t i = 0; i < n; ++i) {
    const bool released = i >= 10 && i < n - 5 && (i < keep_begin || i >= keep_end);
    if (data[i] != (released ? 0.0f : 7.0f)) FAIL("element " << i << " is " << data[i]);
  }
  data.assign(n, 3.0f);
  dtrain::trainer::release_range(data.data(), n);
  CHECK(std::all_of(data.begin(), data.end(), [](float x) { return x == 0.0f; }));
  CHECK_THROWS_AS(dtrain::trainer::release_outside(data.data(), 10, 20, 5, 15), std::logic_error);
}

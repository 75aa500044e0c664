// fp16's state in the state file (PrecisionState): AdamW's step count and the loss scaler's scale and growth
// tracker round-trip exactly, files written before the fields existed still load (as "no precision state"), and
// the checksum covers the new fields.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/flip_bit.h"
#include "tests/unit/small_gpt_config.h"
#include "tests/unit/temp_dir.h"
#include "trainer/ckpt/atomic_file.h"
#include "trainer/ckpt/state_file.h"

using namespace dtrain::trainer;

namespace {

constexpr std::size_t kPrecisionParams = 300;

std::vector<float> precision_ramp(std::size_t n, float scale) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>(i % 31) - 0.5f;
  return out;
}

TrainState small_state(std::uint64_t step) {
  TrainState state;
  state.step = step;
  state.data_step = step + 3;
  state.seed = 1337;
  state.config = small_gpt_config();
  state.batch_size = 4;
  state.seq_len = 16;
  state.world_size = 2;
  state.grad_accum = 1;
  state.num_params = kPrecisionParams;
  state.model_crc = 0x01020304u;
  return state;
}

// FNV-1a over 64-bit words, as the state file's format (state_file.h) specifies it.
std::uint64_t fnv1a_words(const std::vector<unsigned char>& bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    hash ^= w;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// A state file laid out as trainers wrote it before the precision fields existed, from the documented format
// rather than from write_state_file: 16 int32 (the last three zero), 24 uint64 (the last 19 zero), m, v, checksum.
void write_old_state_file(const std::string& path, const TrainState& s, const std::vector<float>& m,
                          const std::vector<float>& v) {
  const GptConfig& c = s.config;
  const std::array<std::int32_t, 16> ints = {kStateFileMagic, 1, c.max_seq_len, c.vocab_size, c.num_layers,
                                             c.num_heads, c.channels, c.padded_vocab_size, s.batch_size, s.seq_len,
                                             s.world_size, s.grad_accum, 1, 0, 0, 0};
  std::array<std::uint64_t, 24> words{};
  words[0] = s.step;
  words[1] = s.data_step;
  words[2] = s.seed;
  words[3] = s.num_params;
  words[4] = *s.model_crc;
  std::vector<unsigned char> bytes(sizeof(ints) + sizeof(words) + 2 * kPrecisionParams * sizeof(float));
  unsigned char* p = bytes.data();
  std::memcpy(p, ints.data(), sizeof(ints));
  std::memcpy(p + sizeof(ints), words.data(), sizeof(words));
  std::memcpy(p + 256, m.data(), kPrecisionParams * sizeof(float));
  std::memcpy(p + 256 + kPrecisionParams * sizeof(float), v.data(), kPrecisionParams * sizeof(float));
  const std::uint64_t checksum = fnv1a_words(bytes);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.write(reinterpret_cast<const char*>(&checksum), sizeof(checksum));
}

}  // namespace

TEST_CASE("fp16's precision state round-trips exactly, beside the rest of the state") {
  TempDir dir{"trainer-ckpt-precision"};
  auto m = precision_ramp(kPrecisionParams, 0.01f), v = precision_ramp(kPrecisionParams, 0.02f);
  TrainState state = small_state(12);
  // A scale that is not a power of two checks that the float's bits are stored, not a rounded value.
  state.precision = PrecisionState{.adam_steps = 9, .loss_scale = 0.15625f * 3.0f, .growth_tracker = 5};
  write_state_file(dir.file("state.bin"), state, m.data(), v.data());

  std::vector<float> m2(kPrecisionParams), v2(kPrecisionParams);
  const TrainState back = read_state_file(dir.file("state.bin"), m2.data(), v2.data(), kPrecisionParams);
  REQUIRE(back.precision.has_value());
  CHECK(back.precision->adam_steps == 9);
  CHECK(back.precision->loss_scale == 0.15625f * 3.0f);
  CHECK(back.precision->growth_tracker == 5);
  CHECK(back.step == 12);
  CHECK(back.data_step == 15);
  REQUIRE(back.model_crc.has_value());
  CHECK(*back.model_crc == 0x01020304u);
  CHECK(m2 == m);
  CHECK(v2 == v);
  CHECK(read_state_header(dir.file("state.bin")).precision->adam_steps == 9);

  // The largest scale fp32 holds survives too (GradScaler never grows it past fp32's range).
  state.precision->loss_scale = 3.4028234663852886e38f;
  write_state_file(dir.file("big.bin"), state, m.data(), v.data());
  CHECK(read_state_header(dir.file("big.bin")).precision->loss_scale == 3.4028234663852886e38f);

  // A run without loss scaling writes none, and reads none back.
  state.precision.reset();
  write_state_file(dir.file("none.bin"), state, m.data(), v.data());
  CHECK_FALSE(read_state_file(dir.file("none.bin"), m2.data(), v2.data(), kPrecisionParams).precision.has_value());
}

TEST_CASE("a state file written before the precision fields existed loads, with no precision state") {
  TempDir dir{"trainer-ckpt-precision-old"};
  auto m = precision_ramp(kPrecisionParams, 0.03f), v = precision_ramp(kPrecisionParams, 0.04f);
  const TrainState state = small_state(40);
  write_old_state_file(dir.file("old.bin"), state, m, v);

  std::vector<float> m2(kPrecisionParams), v2(kPrecisionParams);
  const TrainState back = read_state_file(dir.file("old.bin"), m2.data(), v2.data(), kPrecisionParams);
  CHECK_FALSE(back.precision.has_value());
  CHECK(back.step == 40);
  CHECK(back.world_size == 2);
  REQUIRE(back.model_crc.has_value());
  CHECK(*back.model_crc == 0x01020304u);
  CHECK(m2 == m);
  CHECK(v2 == v);

  // And writing the same state without precision gives that file byte for byte: older trainers read it unchanged.
  write_state_file(dir.file("new.bin"), state, m.data(), v.data());
  std::ifstream a(dir.file("old.bin"), std::ios::binary), b(dir.file("new.bin"), std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
}

TEST_CASE("the checksum covers the precision fields: a flipped bit in any of them is refused") {
  TempDir dir{"trainer-ckpt-precision-crc"};
  auto m = precision_ramp(kPrecisionParams, 0.05f), v = precision_ramp(kPrecisionParams, 0.06f);
  TrainState state = small_state(8);
  state.precision = PrecisionState{.adam_steps = 6, .loss_scale = 32768.0f, .growth_tracker = 2};
  // Byte offsets in the header (state_file.h): has_precision is int32 #13, growth_tracker #14; adam_steps is
  // uint64 #5 and loss_scale #6 after the 64 bytes of int32s.
  const std::size_t offsets[] = {13 * 4, 14 * 4, 64 + 5 * 8, 64 + 6 * 8 + 2};
  for (std::size_t offset : offsets) {
    CAPTURE(offset);
    const std::string path = dir.file("state_" + std::to_string(offset) + ".bin");
    write_state_file(path, state, m.data(), v.data());
    flip_bit(path, offset, 0x01);
    std::vector<float> m2(kPrecisionParams), v2(kPrecisionParams);
    CHECK_THROWS_WITH_AS(read_state_file(path, m2.data(), v2.data(), kPrecisionParams),
                         doctest::Contains("checksum mismatch"), CheckpointError);
  }
}

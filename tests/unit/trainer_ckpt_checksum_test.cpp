// Checkpoint integrity: the model file's CRC-32C is recorded in its state file (the model file stays llm.c's format),
// a flipped bit in either file is found before resuming, and what interrupted saves leave behind is removed without
// touching anything else in the directory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/unit/flip_bit.h"
#include "tests/unit/small_gpt_config.h"
#include "tests/unit/temp_dir.h"
#include "trainer/ckpt/checkpoint_dir.h"
#include "trainer/ckpt/crc32c.h"
#include "trainer/ckpt/model_file.h"
#include "trainer/ckpt/state_file.h"
#include "tests/unit/contains.h"

using namespace dtrain::trainer;
namespace fs = std::filesystem;

namespace {

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>(i % 97) - 1.0f;
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

constexpr std::size_t kParams = 1000;

// Writes a complete pair as the trainer does: the model, then the state recording the model's checksum.
CheckpointPair save_pair(const std::string& dir, std::uint64_t step) {
  CheckpointPair pair = checkpoint_pair(dir, step);
  auto params = ramp(kParams, 0.01f * static_cast<float>(step));
  auto m = ramp(kParams, 0.001f), v = ramp(kParams, 0.002f);
  TrainState state;
  state.step = step;
  state.config = small_gpt_config();
  state.num_params = kParams;
  state.model_crc = write_model_file(pair.model, small_gpt_config(), params.data(), kParams);
  write_state_file(pair.state, state, m.data(), v.data());
  return pair;
}

}  // namespace

TEST_CASE("crc32c gives the standard check value, extends in pieces, and sees a single flipped bit") {
  CHECK(crc32c(0, "123456789", 9) == 0xe3069283u);
  CHECK(crc32c(0, "", 0) == 0u);
  std::string text(1000, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7);
  std::uint32_t whole = crc32c(0, text.data(), text.size());
  for (std::size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    CHECK(crc32c(crc32c(0, text.data(), cut), text.data() + cut, text.size() - cut) == whole);
  }
  text[123] = static_cast<char>(text[123] ^ 0x40);
  CHECK(crc32c(0, text.data(), text.size()) != whole);
}

TEST_CASE("the model file's checksum covers the whole file and the model file stays llm.c's format") {
  TempDir dir{"trainer-ckpt-crc"};
  auto params = ramp(kParams, 0.5f);
  std::string path = dir.file("model.bin");
  std::uint32_t written = write_model_file(path, small_gpt_config(), params.data(), kParams);
  std::string bytes = read_all(path);
  CHECK(bytes.size() == 1024 + 4 * kParams);  // no checksum appended: llm.c reads it as before
  CHECK(written == crc32c(0, bytes.data(), bytes.size()));
  std::vector<float> back(kParams);
  CHECK(read_model_file(path, small_gpt_config(), back.data(), kParams) == written);
}

TEST_CASE("the state file records the model checksum; one without it reads as unrecorded") {
  TempDir dir{"trainer-ckpt-crc"};
  auto m = ramp(kParams, 0.1f), v = ramp(kParams, 0.2f);
  TrainState state;
  state.step = 7;
  state.config = small_gpt_config();
  state.num_params = kParams;
  state.model_crc = 0xdeadbeefu;
  write_state_file(dir.file("with.bin"), state, m.data(), v.data());
  std::vector<float> m2(kParams), v2(kParams);
  TrainState back = read_state_file(dir.file("with.bin"), m2.data(), v2.data(), kParams);
  REQUIRE(back.model_crc.has_value());
  CHECK(*back.model_crc == 0xdeadbeefu);

  // A file written before the field existed has zeros there, which is exactly what writing without one gives.
  state.model_crc.reset();
  write_state_file(dir.file("without.bin"), state, m.data(), v.data());
  CHECK_FALSE(read_state_header(dir.file("without.bin")).model_crc.has_value());
}

TEST_CASE("reading a pair verifies both files: a flipped exponent bit in the model is refused, naming the file") {
  TempDir dir{"trainer-ckpt-crc"};
  CheckpointPair pair = save_pair(dir.path, 500);
  std::vector<float> params(kParams), m(kParams), v(kParams);
  bool checked = false;
  TrainState state = read_checkpoint_pair(pair, small_gpt_config(), params.data(), m.data(), v.data(), kParams, checked);
  CHECK(checked);
  CHECK(state.step == 500);

  // The high byte of a little-endian float: the sign and seven exponent bits. The file keeps its size and header.
  flip_bit(pair.model, 1024 + 4 * 321 + 3, 0x10);
  std::string error =
      error_of([&] { read_checkpoint_pair(pair, small_gpt_config(), params.data(), m.data(), v.data(), kParams, checked); });
  CHECK(contains(error, "model checkpoint " + pair.model + ": checksum mismatch"));
  CHECK(contains(error, pair.state + " recorded"));

  flip_bit(pair.model, 1024 + 4 * 321 + 3, 0x10);  // repaired
  flip_bit(pair.state, 256 + 4 * 10, 0x01);
  error =
      error_of([&] { read_checkpoint_pair(pair, small_gpt_config(), params.data(), m.data(), v.data(), kParams, checked); });
  CHECK(contains(error, "state file " + pair.state + ": checksum mismatch"));
}

TEST_CASE("the verified header checks the whole state file: a flipped bit in a shape field is damage") {
  // An odd count over 1 MiB per array: the file is summed in several pieces, each array ending in a half word.
  constexpr std::size_t kMany = 300'001;
  TempDir dir{"trainer-ckpt-crc"};
  auto m = ramp(kMany, 0.1f), v = ramp(kMany, 0.2f);
  TrainState state;
  state.step = 12;
  state.config = small_gpt_config();
  state.batch_size = 4;
  state.seq_len = 16;
  state.world_size = 1;
  state.grad_accum = 1;
  state.num_params = kMany;
  const std::string path = dir.file("state_12.bin");
  write_state_file(path, state, m.data(), v.data());
  TrainState verified = read_verified_state_header(path);
  CHECK(verified.step == 12);
  CHECK(verified.num_params == kMany);
  CHECK(describe_header(verified.config) == describe_header(small_gpt_config()));

  // ints[6] is the channel count: the file keeps its size, and the unverified header reads another model.
  flip_bit(path, 4 * 6, 0x10);
  CHECK(read_state_header(path).config.channels == 8 + 16);
  CHECK(contains(error_of([&] { read_verified_state_header(path); }), "state file " + path + ": checksum mismatch"));
  flip_bit(path, 4 * 6, 0x10);  // repaired
  CHECK_NOTHROW(read_verified_state_header(path));

  // The last byte of v, in the last piece's half word.
  const std::size_t last_of_v = 256 + 2 * 4 * kMany - 1;
  flip_bit(path, last_of_v, 0x01);
  CHECK(contains(error_of([&] { read_verified_state_header(path); }), "checksum mismatch"));
}

TEST_CASE("interrupted saves are removed: temporary files and a model file newer than every complete pair") {
  TempDir dir{"trainer-ckpt-crc"};
  save_pair(dir.path, 400);
  save_pair(dir.path, 500);
  touch(dir.file("model_600.bin"));             // a save killed between its model and its state file
  touch(dir.file("state_700.bin.tmp.4242"));    // a save killed inside a write
  touch(dir.file("model_700.bin.tmp.4242"));
  touch(dir.file("model_300.bin"));             // older than the newest pair: not from an interrupted save
  touch(dir.file("model_00000800.bin"));        // llm.c's own naming: not ours
  touch(dir.file("notes.txt"));

  std::vector<std::string> lines = remove_interrupted_saves(dir.path);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "model_600.bin has no state file (an interrupted save): removed");
  CHECK(lines[1] == "model_700.bin.tmp.4242 is a partly written file (a save that was interrupted): removed");
  CHECK(lines[2] == "state_700.bin.tmp.4242 is a partly written file (a save that was interrupted): removed");

  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir.path)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"model_00000800.bin", "model_300.bin", "model_400.bin", "model_500.bin",
                                         "notes.txt", "state_400.bin", "state_500.bin"});
  CHECK(remove_interrupted_saves(dir.path).empty());

  // With no complete pair at all, any model file of ours without a state file is an interrupted save.
  TempDir first{"trainer-ckpt-crc"};
  touch(first.file("model_4.bin"));
  CHECK(remove_interrupted_saves(first.path) ==
        std::vector<std::string>{"model_4.bin has no state file (an interrupted save): removed"});
  CHECK(remove_interrupted_saves(first.file("missing")).empty());
}

// Checkpoints: llm.c model files and state files round-trip exactly, damaged or foreign files are refused, writes
// are atomic (a writer killed mid-write leaves the old file), and the directory listing finds complete pairs only.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/small_gpt_config.h"
#include "tests/unit/temp_dir.h"
#include "trainer/ckpt/atomic_file.h"
#include "trainer/ckpt/checkpoint_dir.h"
#include "trainer/ckpt/model_file.h"
#include "trainer/ckpt/state_file.h"

using namespace dtrain::trainer;
namespace fs = std::filesystem;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> out(n);
  for (auto& x : out) x = normal(rng);
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string files_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names_in(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("an llm.c model file round-trips bit for bit with llm.c's header") {
  TempDir dir{"trainer-ckpt"};
  GptConfig config = small_gpt_config();
  auto params = random_floats(1234, 1);
  std::string path = dir.file("model.bin");
  write_model_file(path, config, params.data(), params.size());

  std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() == 1024 + 4 * params.size());
  std::vector<std::int32_t> header(256);
  std::memcpy(header.data(), bytes.data(), 1024);
  CHECK(header[0] == 20240326);
  CHECK(header[1] == 3);
  CHECK(header[2] == 16);
  CHECK(header[3] == 200);
  CHECK(header[4] == 2);
  CHECK(header[5] == 2);
  CHECK(header[6] == 8);
  CHECK(header[7] == 256);
  for (int i = 8; i < 256; ++i) CHECK(header[i] == 0);
  CHECK(std::memcmp(bytes.data() + 1024, params.data(), 4 * params.size()) == 0);

  GptConfig found = read_model_header(path);
  CHECK(describe_header(found) == describe_header(config));
  std::vector<float> back(params.size());
  read_model_file(path, config, back.data(), back.size());
  CHECK(back == params);
}

TEST_CASE("model files of another shape, size, format or version are refused with the fix") {
  TempDir dir{"trainer-ckpt"};
  GptConfig config = small_gpt_config();
  auto params = random_floats(100, 2);
  std::string path = dir.file("model.bin");
  write_model_file(path, config, params.data(), params.size());
  std::vector<float> out(100);

  GptConfig other = config;
  other.num_layers = 3;
  std::string message = files_error_of([&] { read_model_file(path, other, out.data(), out.size()); });
  CHECK(message.find("L=2") != std::string::npos);
  CHECK(message.find("L=3") != std::string::npos);
  CHECK(message.find("--model") != std::string::npos);

  CHECK(files_error_of([&] { read_model_file(path, config, out.data(), 99); }).find("truncated") != std::string::npos);

  std::string bf16 = dir.file("bf16.bin");
  fs::copy_file(path, bf16);
  {
    std::fstream f(bf16, std::ios::binary | std::ios::in | std::ios::out);
    std::int32_t five = 5;
    f.seekp(4);
    f.write(reinterpret_cast<const char*>(&five), 4);
  }
  CHECK(files_error_of([&] { read_model_header(bf16); }).find("bf16") != std::string::npos);

  std::string shard = dir.file("shard.bin");
  {
    std::ofstream f(shard, std::ios::binary);
    std::vector<std::int32_t> header(256);
    header[0] = 20240520;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  CHECK(files_error_of([&] { read_model_header(shard); }).find("--data") != std::string::npos);
  CHECK(files_error_of([&] { read_model_header(dir.file("missing.bin")); }).find("cannot open") != std::string::npos);
}

TEST_CASE("a state file round-trips, and damage is detected by its size or its checksum") {
  TempDir dir{"trainer-ckpt"};
  TrainState state;
  state.step = 1234567890123ull;
  state.data_step = 42;
  state.seed = 0xdeadbeefcafeull;
  state.config = small_gpt_config();
  state.batch_size = 4;
  state.seq_len = 16;
  state.world_size = 2;
  state.grad_accum = 3;
  state.num_params = 777;
  auto m = random_floats(777, 3);
  auto v = random_floats(777, 4);
  std::string path = dir.file("state.bin");
  write_state_file(path, state, m.data(), v.data());
  CHECK(fs::file_size(path) == 256 + 2 * 4 * 777 + 8);

  TrainState header = read_state_header(path);
  CHECK(header.step == state.step);
  CHECK(header.num_params == 777);
  std::vector<float> m2(777), v2(777);
  TrainState back = read_state_file(path, m2.data(), v2.data(), 777);
  CHECK(back.step == state.step);
  CHECK(back.data_step == 42);
  CHECK(back.seed == state.seed);
  CHECK(describe_header(back.config) == describe_header(state.config));
  CHECK(back.batch_size == 4);
  CHECK(back.seq_len == 16);
  CHECK(back.world_size == 2);
  CHECK(back.grad_accum == 3);
  CHECK(m2 == m);
  CHECK(v2 == v);

  CHECK(files_error_of([&] { read_state_file(path, m2.data(), v2.data(), 778); }).find("778") != std::string::npos);

  std::string flipped = dir.file("flipped.bin");
  fs::copy_file(path, flipped);
  {
    std::fstream f(flipped, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(256 + 4 * 500);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(256 + 4 * 500);
    f.write(&c, 1);
  }
  CHECK_NOTHROW(read_state_header(flipped));
  CHECK(files_error_of([&] { read_state_file(flipped, m2.data(), v2.data(), 777); }).find("checksum") !=
        std::string::npos);

  std::string cut = dir.file("cut.bin");
  fs::copy_file(path, cut);
  fs::resize_file(cut, fs::file_size(path) - 8);
  CHECK(files_error_of([&] { read_state_header(cut); }).find("truncated") != std::string::npos);

  std::string model = dir.file("model.bin");
  write_model_file(model, small_gpt_config(), m.data(), m.size());
  CHECK(files_error_of([&] { read_state_header(model); }).find("not a dtrain-trainer state file") != std::string::npos);
}

TEST_CASE("a state file whose parameter count would overflow the size check is refused") {
  // Found by fuzzing (tests/fuzz/checkpoint.cpp): 256 + 2 * 4 * n + 8 wraps for n = 2^62, so a 264-byte file
  // claimed 2^62 parameters and the reader went on to allocate for them.
  TempDir dir{"trainer-ckpt"};
  TrainState state;
  state.config = small_gpt_config();
  state.num_params = 0;
  const std::string path = dir.file("state.bin");
  write_state_file(path, state, nullptr, nullptr);
  CHECK(fs::file_size(path) == 264);
  CHECK(read_state_header(path).num_params == 0);
  for (const std::uint64_t claimed : {std::uint64_t{1} << 62, std::uint64_t{1} << 61, ~std::uint64_t{0}}) {
    CAPTURE(claimed);
    {
      std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
      f.seekp(64 + 3 * 8);  // words[3]: num_params
      f.write(reinterpret_cast<const char*>(&claimed), sizeof claimed);
    }
    CHECK(files_error_of([&] { read_state_header(path); }).find("truncated or damaged") != std::string::npos);
  }
}

TEST_CASE("an atomic file is invisible until commit and leaves nothing behind when abandoned") {
  TempDir dir{"trainer-ckpt"};
  std::string path = dir.file("target.bin");
  std::ofstream(path) << "old";
  {
    AtomicFile file(path);
    file.write("new contents", 12);
    CHECK(read_bytes(path) == "old");
    CHECK(fs::exists(file.temp_path()));
  }
  CHECK(read_bytes(path) == "old");
  CHECK(names_in(dir) == std::vector<std::string>{"target.bin"});
  {
    AtomicFile file(path);
    file.write("new contents", 12);
    file.commit();
  }
  CHECK(read_bytes(path) == "new contents");
  CHECK(names_in(dir) == std::vector<std::string>{"target.bin"});
  CHECK(files_error_of([&] { AtomicFile f(dir.file("no/such/dir/x.bin")); }).find("checkpoint directory") !=
        std::string::npos);
}

TEST_CASE("a writer killed in the middle of a checkpoint leaves the previous file whole") {
  TempDir dir{"trainer-ckpt"};
  GptConfig config = small_gpt_config();
  auto old_params = random_floats(1 << 20, 5);
  std::string path = dir.file("model_1.bin");
  write_model_file(path, config, old_params.data(), old_params.size());
  const std::string before = read_bytes(path);

  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Half of a new model file, then a report to the parent, then wait to be killed before commit.
    AtomicFile file(path);
    std::vector<float> update(1 << 19, 1.0f);
    file.write(update.data(), update.size() * sizeof(float));
    char c = 'w';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));

  CHECK(read_bytes(path) == before);
  std::vector<float> back(old_params.size());
  read_model_file(path, config, back.data(), back.size());
  CHECK(back == old_params);
  // The orphaned temporary file is not a checkpoint.
  bool temp_left = false;
  for (const auto& name : names_in(dir)) temp_left |= name.find(".tmp.") != std::string::npos;
  CHECK(temp_left);
}

TEST_CASE("the checkpoint directory lists complete pairs, newest first") {
  TempDir dir{"trainer-ckpt"};
  CHECK(list_checkpoints(dir.file("missing")).empty());
  GptConfig config = small_gpt_config();
  auto params = random_floats(10, 6);
  TrainState state;
  state.config = config;
  state.num_params = 10;
  for (std::uint64_t step : {5, 20, 10}) {
    CheckpointPair pair = checkpoint_pair(dir.path, step);
    CHECK(pair.model == dir.file("model_" + std::to_string(step) + ".bin"));
    write_model_file(pair.model, config, params.data(), params.size());
    state.step = step;
    write_state_file(pair.state, state, params.data(), params.data());
  }
  // Step 30's state was never written (a crash between the two files); step 40 has only a temporary state file.
  write_model_file(checkpoint_pair(dir.path, 30).model, config, params.data(), params.size());
  write_model_file(checkpoint_pair(dir.path, 40).model, config, params.data(), params.size());
  std::ofstream(dir.file("state_40.bin.tmp.123")) << "partial";
  std::ofstream(dir.file("state_x.bin")) << "junk";

  auto pairs = list_checkpoints(dir.path);
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[0].step == 20);
  CHECK(pairs[1].step == 10);
  CHECK(pairs[2].step == 5);
  CHECK(pairs[0].state == dir.file("state_20.bin"));
}

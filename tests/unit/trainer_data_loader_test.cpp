// Token shards and the data order: which tokens every rank and micro-step reads, shard wrap-around, the prefetch
// thread, prepare-text, and clear errors for files that are not shards.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"
#include "trainer/data/loader.h"
#include "trainer/data/prefetch.h"
#include "trainer/data/shard.h"

using namespace dtrain::trainer;
namespace fs = std::filesystem;

namespace {

// A shard whose token at position i is (base + i) % 60000, so every token names its own position.
std::string make_shard(const TempDir& dir, const std::string& name, std::size_t count, std::uint16_t base) {
  std::vector<std::uint16_t> tokens(count);
  for (std::size_t i = 0; i < count; ++i) tokens[i] = static_cast<std::uint16_t>((base + i) % 60000);
  std::string path = dir.file(name);
  write_shard(path, tokens);
  return path;
}

std::vector<std::int32_t> read(const DataLoader& loader, std::uint64_t step, int micro) {
  std::vector<std::int32_t> out(loader.batch_tokens());
  loader.read(step, micro, out.data());
  return out;
}

// The B*T training positions (inputs) of every rank and micro-step of a step, in global row order:
// micro-step-major, then rank (the order the offsets formula lays them out in).
std::vector<std::int32_t> step_rows(const std::string& pattern, int B, int T, int world, int K, std::uint64_t step) {
  std::vector<std::int32_t> rows;
  for (int m = 0; m < K; ++m) {
    for (int r = 0; r < world; ++r) {
      DataLoader loader({pattern, B, T, r, world, K, 0});
      auto batch = read(loader, step, m);
      rows.insert(rows.end(), batch.begin(), batch.end() - 1);
    }
  }
  return rows;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("micro-batch offsets follow ((j*K + m)*W + r)*B*T within a shard") {
  TempDir dir{"trainer-data"};
  std::string path = make_shard(dir, "a.bin", 10000, 0);
  const int B = 2, T = 8, W = 3, K = 2;
  for (int r = 0; r < W; ++r) {
    DataLoader loader({path, B, T, r, W, K, 0});
    CHECK(loader.steps_per_epoch() == (10000 - 1) / (B * T * W * K));
    for (std::uint64_t s = 0; s < 5; ++s) {
      for (int m = 0; m < K; ++m) {
        std::size_t expected = ((s * K + m) * W + r) * B * T;
        CHECK(loader.locate(s, m).offset == expected);
        auto tokens = read(loader, s, m);
        REQUIRE(tokens.size() == static_cast<std::size_t>(B * T + 1));
        CHECK(tokens.front() == static_cast<std::int32_t>(expected));
        CHECK(tokens.back() == static_cast<std::int32_t>(expected + B * T));  // the extra target token
      }
    }
  }
}

TEST_CASE("steps move to the next shard when one is used up, and wrap to the first after the last") {
  TempDir dir{"trainer-data"};
  // One step reads B*T*W*K = 32 tokens (+1): shard a holds 3 steps (100 tokens), b holds 1 (40), c none (20).
  make_shard(dir, "a.bin", 100, 0);
  make_shard(dir, "b.bin", 40, 1000);
  make_shard(dir, "c.bin", 20, 2000);
  const std::string pattern = dir.file("*.bin");
  DataLoader loader({pattern, 4, 4, 0, 2, 1, 0});
  REQUIRE(loader.shards().size() == 2);
  REQUIRE(loader.skipped().size() == 1);
  CHECK(loader.skipped()[0] == dir.file("c.bin"));
  CHECK(loader.steps_per_epoch() == 4);
  CHECK(read(loader, 0, 0).front() == 0);
  CHECK(read(loader, 2, 0).front() == 64);
  // Step 3 is b's first: the 3 unused tokens at a's end (96..99) are dropped, as llm.c drops them.
  CHECK(loader.locate(3, 0).shard == 1);
  CHECK(loader.locate(3, 0).offset == 0);
  CHECK(read(loader, 3, 0).front() == 1000);
  DataLoader rank1({pattern, 4, 4, 1, 2, 1, 0});
  CHECK(read(rank1, 3, 0).front() == 1016);
  CHECK(read(rank1, 3, 0).back() == 1032);
  // Step 4 starts the next epoch at a's beginning.
  CHECK(loader.locate(4, 0).shard == 0);
  CHECK(read(loader, 4, 0) == read(loader, 0, 0));
  CHECK(read(loader, 4 * 1000 + 3, 0) == read(loader, 3, 0));
}

TEST_CASE("2 ranks x B/2 and 2 micro-steps x B/2 read exactly the rows of 1 rank x B, across shard ends") {
  TempDir dir{"trainer-data"};
  make_shard(dir, "a.bin", 1000, 0);
  make_shard(dir, "b.bin", 700, 5000);
  const std::string pattern = dir.file("*.bin");
  const int T = 16;
  DataLoader single({pattern, 8, T, 0, 1, 1, 0});
  for (std::uint64_t s = 0; s < 3 * single.steps_per_epoch(); ++s) {
    auto reference = step_rows(pattern, 8, T, 1, 1, s);
    CHECK(step_rows(pattern, 4, T, 2, 1, s) == reference);
    CHECK(step_rows(pattern, 4, T, 1, 2, s) == reference);
    CHECK(step_rows(pattern, 2, T, 2, 2, s) == reference);
  }
}

TEST_CASE("the prefetcher yields the loader's batches in training order, ahead of time") {
  TempDir dir{"trainer-data"};
  std::string path = make_shard(dir, "a.bin", 5000, 7);
  DataLoader loader({path, 2, 8, 1, 2, 3, 0});
  Prefetcher prefetch(loader, 5, 2);
  for (std::uint64_t s = 5; s < 5 + 2 * loader.steps_per_epoch(); ++s) {
    for (int m = 0; m < 3; ++m) {
      Batch batch = prefetch.next();
      CHECK(batch.step == s);
      CHECK(batch.micro_step == m);
      CHECK(batch.tokens.to_vector() == read(loader, s, m));
      CHECK(batch.targets()[0] == batch.inputs()[1]);
    }
  }
}

TEST_CASE("the prefetcher stops cleanly while blocked on a full queue") {
  TempDir dir{"trainer-data"};
  std::string path = make_shard(dir, "a.bin", 5000, 0);
  DataLoader loader({path, 2, 8, 0, 1, 1, 0});
  { Prefetcher prefetch(loader, 0, 1); }
  Prefetcher prefetch(loader, 0, 1);
  CHECK(prefetch.next().step == 0);
}

TEST_CASE("a token outside the vocabulary is an error naming the shard and position, also through the prefetcher") {
  TempDir dir{"trainer-data"};
  std::vector<std::uint16_t> tokens(200, 3);
  tokens[150] = 300;
  std::string path = dir.file("big.bin");
  write_shard(path, tokens);
  DataLoader loader({path, 1, 32, 0, 1, 1, 256});
  CHECK_NOTHROW(read(loader, 0, 0));
  std::string message = error_of([&] { read(loader, 4, 0); });
  CHECK(message.find("token 300 at position 150") != std::string::npos);
  CHECK(message.find(path) != std::string::npos);
  Prefetcher prefetch(loader, 0, 8);
  for (int s = 0; s < 4; ++s) CHECK(prefetch.next().step == static_cast<std::uint64_t>(s));
  CHECK_THROWS_AS(prefetch.next(), DataError);
}

TEST_CASE("prepare-text writes llm.c's shard header and one token per byte") {
  TempDir dir{"trainer-data"};
  std::string text = dir.file("in.txt");
  std::string content = "Hello, shard!\n\xff\x00 bytes";
  content += std::string("\0end", 4);
  {
    std::ofstream out(text, std::ios::binary);
    out << content;
  }
  std::string shard_path = dir.file("out.bin");
  CHECK(prepare_text(text, shard_path) == content.size());

  std::ifstream in(shard_path, std::ios::binary);
  std::vector<std::int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == static_cast<std::int32_t>(content.size()));
  for (int i = 3; i < 256; ++i) CHECK(header[i] == 0);
  std::vector<std::uint16_t> tokens(content.size());
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  CHECK(in.gcount() == static_cast<std::streamsize>(tokens.size() * 2));
  CHECK(in.peek() == EOF);
  for (std::size_t i = 0; i < content.size(); ++i) CHECK(tokens[i] == static_cast<unsigned char>(content[i]));

  Shard shard(shard_path);
  CHECK(shard.tokens() == content.size());
  std::vector<std::int32_t> back(content.size());
  shard.read(0, back.size(), back.data());
  CHECK(back[14] == 0xff);

  std::string empty = dir.file("empty.txt");
  std::ofstream{empty};
  CHECK(error_of([&] { prepare_text(empty, dir.file("x.bin")); }).find("is empty") != std::string::npos);
  CHECK(error_of([&] { prepare_text(dir.file("missing.txt"), dir.file("x.bin")); }).find("cannot read") !=
        std::string::npos);
}

TEST_CASE("files that are not shards are refused with a reason") {
  TempDir dir{"trainer-data"};
  std::string good = make_shard(dir, "good.bin", 300, 0);
  auto patch_int = [&](const std::string& path, int index, std::int32_t value) {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(index * 4);
    f.write(reinterpret_cast<const char*>(&value), 4);
  };

  std::string magic = dir.file("magic.bin");
  fs::copy_file(good, magic);
  patch_int(magic, 0, 20240326);  // a model checkpoint's magic
  CHECK(error_of([&] { Shard s(magic); }).find("magic is 20240326, expected 20240520") != std::string::npos);

  std::string version = dir.file("version.bin");
  fs::copy_file(good, version);
  patch_int(version, 1, 2);
  CHECK(error_of([&] { Shard s(version); }).find("version is 2") != std::string::npos);

  std::string truncated = dir.file("truncated.bin");
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, 1024 + 2 * 299);
  CHECK(error_of([&] { Shard s(truncated); }).find("truncated") != std::string::npos);

  std::string tiny = dir.file("tiny.bin");
  std::ofstream(tiny) << "not a shard";
  CHECK(error_of([&] { Shard s(tiny); }).find("shorter than the 1024-byte") != std::string::npos);

  CHECK(error_of([&] { DataLoader l({dir.file("nothing*.bin"), 1, 8, 0, 1, 1, 0}); }).find("no file matches") !=
        std::string::npos);
  // A glob with a bad shard among good ones fails on the bad one, by name.
  CHECK(error_of([&] { DataLoader l({dir.file("*.bin"), 1, 8, 0, 1, 1, 0}); }).find(magic) != std::string::npos);
  // Shards too small for one step: the message says how many tokens a step needs.
  CHECK(error_of([&] { DataLoader l({good, 4, 64, 0, 2, 1, 0}); }).find("513") != std::string::npos);
}

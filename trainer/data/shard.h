#pragma once

// llm.c token shards: a header of 256 int32 (magic 20240520, version 1, token count, the rest 0), then the tokens
// as uint16, little endian. Files prepared for llm.c (fineweb, tinyshakespeare, ...) load as they are.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/common/unique_fd.h"

namespace dtrain::trainer {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderInts = 256;
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);

// A file that is not a readable shard, or a request it cannot serve. The message names the file and what to do.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One open shard: the header is checked against the file size at open; tokens are read with pread, so one Shard
// may be read from several threads.
class Shard {
 public:
  // Throws DataError if the file is missing, is not an llm.c shard (magic, version), or its size does not match
  // the token count in its header.
  explicit Shard(std::string path);

  const std::string& path() const { return path_; }
  std::size_t tokens() const { return tokens_; }

  // out[i] = token at begin + i for i < count. Throws DataError past the end or on a read error.
  void read(std::size_t begin, std::size_t count, std::int32_t* out) const;

 private:
  std::string path_;
  UniqueFd fd_;
  std::size_t tokens_ = 0;
};

// Writes `tokens` as a shard at `path` (each must fit in uint16). Throws DataError on a bad token or I/O error.
void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

// `dtrain-trainer prepare-text IN OUT`: every byte of IN becomes one token (vocabulary 256). Returns the token
// count. Throws DataError if IN cannot be read, is empty, or is too large for one shard's int32 token count.
std::size_t prepare_text(const std::string& text_path, const std::string& shard_path);

}  // namespace dtrain::trainer

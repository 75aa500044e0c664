#include "trainer/data/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

namespace dtrain::trainer {
namespace {

std::string os_error() { return std::strerror(errno); }

// Reads exactly `bytes` at `offset`; false on a short read.
bool pread_all(int fd, void* data, std::size_t bytes, off_t offset) {
  auto* out = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, out, bytes, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    bytes -= static_cast<std::size_t>(got);
    offset += got;
  }
  return true;
}

}  // namespace

Shard::Shard(std::string path) : path_(std::move(path)) {
  fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_.valid()) {
    throw DataError("data shard " + path_ + ": cannot open (" + os_error() + "); check the --data glob");
  }
  struct stat st {};
  std::array<std::int32_t, kShardHeaderInts> header{};
  // A throw below closes the file: fd_ owns it.
  if (::fstat(fd_.get(), &st) != 0 || static_cast<std::size_t>(st.st_size) < kShardHeaderBytes ||
      !pread_all(fd_.get(), header.data(), kShardHeaderBytes, 0)) {
    throw DataError("data shard " + path_ + ": shorter than the 1024-byte llm.c shard header; it is not a token shard "
                    "(make one with `dtrain-trainer prepare-text IN.txt OUT.bin`)");
  }
  std::string problem;
  if (header[0] != kShardMagic) {
    problem = "magic is " + std::to_string(header[0]) + ", expected " + std::to_string(kShardMagic) +
              "; it is not an llm.c token shard (make one with `dtrain-trainer prepare-text IN.txt OUT.bin`)";
  } else if (header[1] != kShardVersion) {
    problem = "version is " + std::to_string(header[1]) + ", only version 1 (uint16 tokens) is supported";
  } else if (header[2] <= 0) {
    problem = "its header holds " + std::to_string(header[2]) + " tokens";
  } else {
    std::size_t expected = kShardHeaderBytes + static_cast<std::size_t>(header[2]) * sizeof(std::uint16_t);
    if (static_cast<std::size_t>(st.st_size) != expected) {
      problem = "the header says " + std::to_string(header[2]) + " tokens (" + std::to_string(expected) +
                " bytes) but the file has " + std::to_string(st.st_size) + " bytes; it is truncated or not a shard";
    }
  }
  if (!problem.empty()) {
    throw DataError("data shard " + path_ + ": " + problem);
  }
  tokens_ = static_cast<std::size_t>(header[2]);
}

void Shard::read(std::size_t begin, std::size_t count, std::int32_t* out) const {
  if (begin > tokens_ || count > tokens_ - begin) {
    throw DataError("data shard " + path_ + ": tokens [" + std::to_string(begin) + ", " +
                    std::to_string(begin + count) + ") are past its end (" + std::to_string(tokens_) + " tokens)");
  }
  std::vector<std::uint16_t> raw(count);
  if (!pread_all(fd_.get(), raw.data(), count * sizeof(std::uint16_t),
                 static_cast<off_t>(kShardHeaderBytes + begin * sizeof(std::uint16_t)))) {
    throw DataError("data shard " + path_ + ": read of tokens [" + std::to_string(begin) + ", " +
                    std::to_string(begin + count) + ") failed (" + os_error() + ")");
  }
  for (std::size_t i = 0; i < count; ++i) out[i] = raw[i];
}

void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  if (tokens.empty() || tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw DataError("data shard " + path + ": cannot hold " + std::to_string(tokens.size()) +
                    " tokens (1 .. 2^31-1 per shard)");
  }
  std::array<std::int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(std::uint16_t)));
  out.close();
  if (!out) {
    throw DataError("data shard " + path + ": write failed (" + os_error() + "); check the directory and free space");
  }
}

std::size_t prepare_text(const std::string& text_path, const std::string& shard_path) {
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw DataError("prepare-text: cannot read " + text_path + " (" + os_error() + ")");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) throw DataError("prepare-text: " + text_path + " is empty; nothing to train on");
  // Bytes as tokens: the vocabulary is the 256 byte values (train with --vocab 256).
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  write_shard(shard_path, tokens);
  return tokens.size();
}

}  // namespace dtrain::trainer

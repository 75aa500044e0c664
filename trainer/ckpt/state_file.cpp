#include "trainer/ckpt/state_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

namespace dtrain::trainer {
namespace {

constexpr std::size_t kHeaderBytes = 256;

// The fixed header: 16 int32 then 24 uint64.
struct RawHeader {
  std::array<std::int32_t, 16> ints{};
  std::array<std::uint64_t, 24> words{};
};
static_assert(sizeof(RawHeader) == kHeaderBytes);

// FNV-1a over 64-bit words (bytes past the last whole word are folded in one at a time).
class Checksum {
 public:
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t words = bytes / 8;
    for (std::size_t i = 0; i < words; ++i) {
      std::uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      mix(w);
    }
    for (std::size_t i = words * 8; i < bytes; ++i) mix(p[i]);
  }
  std::uint64_t value() const { return hash_; }

 private:
  void mix(std::uint64_t w) {
    hash_ ^= w;
    hash_ *= 0x100000001b3ull;
  }
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

RawHeader pack(const TrainState& s) {
  RawHeader h;
  h.ints = {kStateFileMagic, kStateFileVersion, s.config.max_seq_len, s.config.vocab_size, s.config.num_layers,
            s.config.num_heads, s.config.channels, s.config.padded_vocab_size, s.batch_size, s.seq_len,
            s.world_size, s.grad_accum, s.model_crc ? 1 : 0, s.precision ? 1 : 0, 0, 0};
  h.words[0] = s.step;
  h.words[1] = s.data_step;
  h.words[2] = s.seed;
  h.words[3] = s.num_params;
  h.words[4] = s.model_crc.value_or(0);
  if (s.precision) {
    h.ints[14] = s.precision->growth_tracker;
    h.words[5] = s.precision->adam_steps;
    std::uint32_t bits;
    std::memcpy(&bits, &s.precision->loss_scale, sizeof(bits));
    h.words[6] = bits;
  }
  return h;
}

TrainState unpack(const RawHeader& h) {
  TrainState s;
  s.config.max_seq_len = h.ints[2];
  s.config.vocab_size = h.ints[3];
  s.config.num_layers = h.ints[4];
  s.config.num_heads = h.ints[5];
  s.config.channels = h.ints[6];
  s.config.padded_vocab_size = h.ints[7];
  s.batch_size = h.ints[8];
  s.seq_len = h.ints[9];
  s.world_size = h.ints[10];
  s.grad_accum = h.ints[11];
  s.step = h.words[0];
  s.data_step = h.words[1];
  s.seed = h.words[2];
  s.num_params = h.words[3];
  if (h.ints[12] == 1) s.model_crc = static_cast<std::uint32_t>(h.words[4]);
  if (h.ints[13] == 1) {
    PrecisionState p;
    p.growth_tracker = h.ints[14];
    p.adam_steps = h.words[5];
    const auto bits = static_cast<std::uint32_t>(h.words[6]);
    std::memcpy(&p.loss_scale, &bits, sizeof(bits));
    s.precision = p;
  }
  return s;
}

RawHeader open_and_check(const std::string& path, std::ifstream& in) {
  in.open(path, std::ios::binary);
  if (!in) throw CheckpointError("state file " + path + ": cannot open (" + std::strerror(errno) + ")");
  RawHeader h;
  in.read(reinterpret_cast<char*>(&h), sizeof(h));
  if (!in || h.ints[0] != kStateFileMagic) {
    throw CheckpointError("state file " + path + ": not a dtrain-trainer state file (bad header)");
  }
  if (h.ints[1] != kStateFileVersion) {
    throw CheckpointError("state file " + path + ": version " + std::to_string(h.ints[1]) +
                          " is not supported (this trainer reads version " + std::to_string(kStateFileVersion) + ")");
  }
  // The moments' size follows from the file's size, and num_params must match it. Computing the expected size
  // from num_params instead would wrap for a damaged count (2^62 parameters "fit" in a 264-byte file).
  constexpr std::uintmax_t kFixedBytes = kHeaderBytes + sizeof(std::uint64_t);
  constexpr std::uintmax_t kBytesPerParam = 2 * sizeof(float);
  std::error_code ec;
  std::uintmax_t size = std::filesystem::file_size(path, ec);
  const bool fits = !ec && size >= kFixedBytes && (size - kFixedBytes) % kBytesPerParam == 0 &&
                    (size - kFixedBytes) / kBytesPerParam == h.words[3];
  if (!fits) {
    const std::string expected = h.words[3] <= (std::numeric_limits<std::uintmax_t>::max() - kFixedBytes) / kBytesPerParam
                                     ? std::to_string(kFixedBytes + h.words[3] * kBytesPerParam) + " bytes"
                                     : "more bytes than any file holds";
    throw CheckpointError("state file " + path + ": " + std::to_string(size) + " bytes, expected " + expected +
                          " for " + std::to_string(h.words[3]) + " parameters; the file is truncated or damaged");
  }
  return h;
}

// After the stored checksum was read: a short read or a sum that differs is damage.
void check_stored_sum(const std::string& path, const std::ifstream& in, const Checksum& sum, std::uint64_t stored) {
  if (!in) throw CheckpointError("state file " + path + ": read failed (" + std::strerror(errno) + ")");
  if (sum.value() != stored) {
    throw CheckpointError("state file " + path + ": checksum mismatch; the file was damaged after it was written");
  }
}

}  // namespace

void write_state_file(const std::string& path, const TrainState& state, const float* m, const float* v) {
  RawHeader header = pack(state);
  std::size_t bytes = state.num_params * sizeof(float);
  Checksum sum;
  sum.add(&header, sizeof(header));
  sum.add(m, bytes);
  sum.add(v, bytes);
  std::uint64_t checksum = sum.value();
  AtomicFile file(path);
  file.write(&header, sizeof(header));
  file.write(m, bytes);
  file.write(v, bytes);
  file.write(&checksum, sizeof(checksum));
  file.commit();
}

TrainState read_state_header(const std::string& path) {
  std::ifstream in;
  return unpack(open_and_check(path, in));
}

TrainState read_verified_state_header(const std::string& path) {
  std::ifstream in;
  RawHeader header = open_and_check(path, in);
  Checksum sum;
  sum.add(&header, sizeof(header));
  // m and v in pieces of whole 64-bit words, each array on its own, exactly as write_state_file summed them.
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  std::vector<char> piece(kPiece);
  const std::uint64_t array_bytes = header.words[3] * sizeof(float);
  for (int array = 0; array < 2 && in; ++array) {
    for (std::uint64_t left = array_bytes; left > 0 && in;) {
      const auto bytes = static_cast<std::size_t>(std::min<std::uint64_t>(left, kPiece));
      in.read(piece.data(), static_cast<std::streamsize>(bytes));
      sum.add(piece.data(), bytes);
      left -= bytes;
    }
  }
  std::uint64_t stored = 0;
  in.read(reinterpret_cast<char*>(&stored), sizeof(stored));
  check_stored_sum(path, in, sum, stored);
  return unpack(header);
}

TrainState read_state_file(const std::string& path, float* m, float* v, std::size_t num_params) {
  std::ifstream in;
  RawHeader header = open_and_check(path, in);
  TrainState state = unpack(header);
  if (state.num_params != num_params) {
    throw CheckpointError("state file " + path + " holds moments for " + std::to_string(state.num_params) +
                          " parameters, but the model has " + std::to_string(num_params));
  }
  std::size_t bytes = num_params * sizeof(float);
  std::uint64_t stored = 0;
  in.read(reinterpret_cast<char*>(m), static_cast<std::streamsize>(bytes));
  in.read(reinterpret_cast<char*>(v), static_cast<std::streamsize>(bytes));
  in.read(reinterpret_cast<char*>(&stored), sizeof(stored));
  Checksum sum;
  sum.add(&header, sizeof(header));
  sum.add(m, bytes);
  sum.add(v, bytes);
  check_stored_sum(path, in, sum, stored);
  return state;
}

}  // namespace dtrain::trainer

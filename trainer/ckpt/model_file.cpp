#include "trainer/ckpt/model_file.h"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trainer/ckpt/crc32c.h"

namespace dtrain::trainer {
namespace {

using Header = std::array<std::int32_t, kModelFileHeaderInts>;

Header read_header(const std::string& path, std::ifstream& in) {
  Header header{};
  in.open(path, std::ios::binary);
  if (!in) throw CheckpointError("model checkpoint " + path + ": cannot open (" + std::strerror(errno) + ")");
  in.read(reinterpret_cast<char*>(header.data()), sizeof(header));
  if (!in) {
    throw CheckpointError("model checkpoint " + path + ": shorter than llm.c's 1024-byte header; not a checkpoint");
  }
  if (header[0] != kModelFileMagic) {
    throw CheckpointError("model checkpoint " + path + ": magic is " + std::to_string(header[0]) + ", expected " +
                          std::to_string(kModelFileMagic) + "; not an llm.c model checkpoint (a token shard has "
                          "magic 20240520: give it to --data, not --init-from)");
  }
  if (header[1] != kModelFileVersion) {
    throw CheckpointError("model checkpoint " + path + ": version " + std::to_string(header[1]) +
                          (header[1] == 5 ? " is llm.c's bf16 format" : " is unknown") +
                          "; only version 3 (fp32) is supported: write it with llm.c's fp32 export");
  }
  return header;
}

GptConfig config_of(const Header& header) {
  GptConfig config;
  config.max_seq_len = header[2];
  config.vocab_size = header[3];
  config.num_layers = header[4];
  config.num_heads = header[5];
  config.channels = header[6];
  config.padded_vocab_size = header[7];
  return config;
}

}  // namespace

std::string describe_header(const GptConfig& c) {
  return "maxT=" + std::to_string(c.max_seq_len) + " V=" + std::to_string(c.vocab_size) +
         " L=" + std::to_string(c.num_layers) + " NH=" + std::to_string(c.num_heads) +
         " C=" + std::to_string(c.channels) + " Vp=" + std::to_string(c.padded_vocab_size);
}

std::uint32_t write_model_file(const std::string& path, const GptConfig& config, const float* params,
                               std::size_t count) {
  Header header{};
  header[0] = kModelFileMagic;
  header[1] = kModelFileVersion;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab_size;
  AtomicFile file(path);
  file.write(header.data(), sizeof(header));
  file.write(params, count * sizeof(float));
  file.commit();
  return crc32c(crc32c(0, header.data(), sizeof(header)), params, count * sizeof(float));
}

GptConfig read_model_header(const std::string& path) {
  std::ifstream in;
  return config_of(read_header(path, in));
}

std::uint32_t read_model_file(const std::string& path, const GptConfig& config, float* params, std::size_t count) {
  std::ifstream in;
  Header header = read_header(path, in);
  GptConfig found = config_of(header);
  if (found.max_seq_len != config.max_seq_len || found.vocab_size != config.vocab_size ||
      found.num_layers != config.num_layers || found.num_heads != config.num_heads ||
      found.channels != config.channels || found.padded_vocab_size != config.padded_vocab_size) {
    throw CheckpointError("model checkpoint " + path + " holds a model of shape " + describe_header(found) +
                          ", but this run builds " + describe_header(config) +
                          "; pass the matching --model or --layers/--channels/--heads/--max-seq-len/--vocab");
  }
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  std::uintmax_t expected = kModelFileHeaderInts * sizeof(std::int32_t) + count * sizeof(float);
  if (ec || size != expected) {
    throw CheckpointError("model checkpoint " + path + ": " + std::to_string(size) + " bytes, expected " +
                          std::to_string(expected) + " for " + std::to_string(count) +
                          " fp32 parameters; the file is truncated or from another program");
  }
  in.read(reinterpret_cast<char*>(params), static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) throw CheckpointError("model checkpoint " + path + ": read failed (" + std::strerror(errno) + ")");
  return crc32c(crc32c(0, header.data(), sizeof(header)), params, count * sizeof(float));
}

}  // namespace dtrain::trainer

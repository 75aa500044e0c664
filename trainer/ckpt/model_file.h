#pragma once

// llm.c's model checkpoint, version 3 (fp32): a header of 256 int32
//   [0] magic 20240326  [1] version 3  [2] maxT  [3] V  [4] L  [5] NH  [6] C  [7] Vp  (the rest 0)
// then every parameter as fp32, tensors in llm.c's order (wte, wpe, ln1w[L], ln1b[L], ..., lnfw, lnfb; see
// trainer/model/layout.h). These functions move whole buffers already in that order; ParamLayout converts
// to and from the model's own layout. Files written here load in llm.c and in trainer/python, and back.

#include <cstddef>
#include <cstdint>
#include <string>

#include "trainer/ckpt/atomic_file.h"
#include "trainer/model/config.h"

namespace dtrain::trainer {

inline constexpr int kModelFileMagic = 20240326;
inline constexpr int kModelFileVersion = 3;
inline constexpr std::size_t kModelFileHeaderInts = 256;

// Writes the header of `config` and params[0, count) (checkpoint order) atomically. Returns the CRC-32C of the
// whole file (header and parameters), which the state file of the same checkpoint records.
std::uint32_t write_model_file(const std::string& path, const GptConfig& config, const float* params,
                               std::size_t count);

// The model shape in the file's header. Throws CheckpointError if the file is missing or not an llm.c fp32
// checkpoint (magic, version; version 5 is llm.c's bf16 and is named as such).
GptConfig read_model_header(const std::string& path);

// Reads exactly `count` floats (checkpoint order) into params; throws CheckpointError if the header's shape
// differs from `config` (naming the fields) or the file size is not header + count floats. Returns the CRC-32C of
// the whole file as read, for the caller to compare with what the state file recorded.
std::uint32_t read_model_file(const std::string& path, const GptConfig& config, float* params, std::size_t count);

// "maxT=64 V=256 L=2 NH=4 C=64 Vp=256" (the header's fields, for messages).
std::string describe_header(const GptConfig& config);

}  // namespace dtrain::trainer

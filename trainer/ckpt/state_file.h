#pragma once

// What a checkpoint needs besides the weights to continue training exactly: AdamW's moments, the step count, the
// data position, the seed and the shape of the run. Binary, little endian, written atomically:
//   int32 magic 0x54534454 ("TDST"), int32 version 1,
//   int32 maxT V L NH C Vp, int32 batch_size seq_len world_size grad_accum,
//   int32 has_model_crc (1 when model_crc is set), int32 has_precision (1 when the precision fields are set),
//   int32 growth_tracker, int32 0 (reserved),
//   uint64 step data_step seed num_params, uint64 model_crc (CRC-32C of the whole model file of the same step,
//   trainer/ckpt/crc32c.h), uint64 adam_steps, uint64 loss_scale (the float's bits in the low 32),
//   uint64 0 x 17 (reserved)                                                  -- 256 bytes in all
//   float m[num_params], float v[num_params]   (the model's flat layout, trainer/model/layout.h)
//   uint64 checksum (FNV-1a over the 64-bit words of everything before it)
// Training draws no random numbers after init_weights(seed) (no dropout), so the seed is the whole RNG state.
// The model file's checksum lives here, not in the model file, so that the model file stays exactly llm.c's format.
// It took two fields that were reserved (zero) in the first files of version 1: those read as "no model checksum",
// and trainers that predate it read the new files unchanged.
// The precision fields (fp16's state, PrecisionState below) took four more reserved fields the same way, so the
// version stays 1: files without them (every file written before, and bf16/fp32 runs' files) read as "no precision
// state", where AdamW's step count equals the step. The checksum covers the whole header, these fields included.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "trainer/ckpt/atomic_file.h"
#include "trainer/model/config.h"

namespace dtrain::trainer {

inline constexpr std::int32_t kStateFileMagic = 0x54534454;
inline constexpr std::int32_t kStateFileVersion = 1;

// fp16 training's state besides the moments (trainer/train/precision.h): a step skipped for an overflow leaves
// AdamW's step count behind the step, and the loss scaler's scale and run of finite steps decide the next steps.
struct PrecisionState {
  std::uint64_t adam_steps = 0;  // AdamW updates taken (the last update's t); step minus the skipped steps
  float loss_scale = 0;          // LossScaler::scale() for the next step
  int growth_tracker = 0;        // LossScaler::growth_tracker(): finite steps in a row since the scale changed
};

struct TrainState {
  std::uint64_t step = 0;       // optimizer steps completed; the next step has 0-based index `step`
  std::uint64_t data_step = 0;  // the data loader step (trainer/data/loader.h) the next optimizer step reads
  std::uint64_t seed = 0;       // --seed the weights were initialised with
  GptConfig config;             // model shape (as the model checkpoint's header)
  int batch_size = 0;           // B per rank and micro-step
  int seq_len = 0;              // T
  int world_size = 0;           // ranks
  int grad_accum = 0;           // micro-steps per optimizer step
  std::uint64_t num_params = 0; // floats in m and in v
  std::optional<std::uint32_t> model_crc;  // CRC-32C of the model file; none in files written before it existed
  std::optional<PrecisionState> precision;  // fp16 runs only; none in other runs' files and in older files
};

// Writes state and m, v (state.num_params floats each) atomically.
void write_state_file(const std::string& path, const TrainState& state, const float* m, const float* v);

// The state without the moments. Throws CheckpointError if the file is missing, not a state file, or its size does
// not match num_params.
TrainState read_state_header(const std::string& path);

// The state without the moments, after verifying the whole file's checksum (the moments are read in 1 MiB pieces
// and dropped). Throws CheckpointError as read_state_file does. A refusal that rests on the header's fields (a
// checkpoint of another model shape or batch) checks this first: a flipped bit in those fields is damage, not
// another run's file.
TrainState read_verified_state_header(const std::string& path);

// Reads m and v (state.num_params floats each, state as read_state_header returned it) and verifies the checksum.
// Throws CheckpointError on a mismatch (the file was damaged after it was written).
TrainState read_state_file(const std::string& path, float* m, float* v, std::size_t num_params);

}  // namespace dtrain::trainer

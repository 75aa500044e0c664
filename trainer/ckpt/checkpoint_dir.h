#pragma once

// The checkpoint directory (--checkpoint-dir): after optimizer step s it holds model_<s>.bin (llm.c format) and
// state_<s>.bin (trainer/ckpt/state_file.h), which records the model file's CRC-32C. Each file is written
// atomically, the model first, so a pair whose state file exists is complete; a crash between the two leaves a
// model file without a state file, and a crash (or SIGKILL) inside a write leaves a temporary file
// (<name>.tmp.<pid>). Neither is ever mistaken for a checkpoint; remove_interrupted_saves() deletes both, since
// each can be as large as the model and a disk filled by them makes the next save fail.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/ckpt/state_file.h"

namespace dtrain::trainer {

struct CheckpointPair {
  std::uint64_t step = 0;  // optimizer steps completed when it was written
  std::string model;       // <dir>/model_<step>.bin
  std::string state;       // <dir>/state_<step>.bin
};

CheckpointPair checkpoint_pair(const std::string& dir, std::uint64_t step);

// Every complete pair in dir, newest (highest step) first; empty if dir does not exist.
std::vector<CheckpointPair> list_checkpoints(const std::string& dir);

// Deletes what interrupted saves left in dir: temporary files of model_<s>.bin / state_<s>.bin, and a model file
// model_<s>.bin without its state file when s is newer than every complete pair (an older one is left alone: it
// is not from an interrupted save of this run, and may be a file the user put there). Returns one line per file
// removed, for the user ("model_600.bin has no state file (an interrupted save): removed"). Call it only where no
// save can be in progress (rank 0, before training starts).
std::vector<std::string> remove_interrupted_saves(const std::string& dir);

// Reads a complete pair into params (checkpoint order), m and v (n floats each) and verifies both checksums: the
// state file's own and the model file's CRC-32C that the state file recorded. Throws CheckpointError naming the
// damaged file. `model_checked` tells whether the model had a recorded checksum (state files that predate it do
// not).
TrainState read_checkpoint_pair(const CheckpointPair& pair, const GptConfig& config, float* params, float* m,
                                float* v, std::size_t n, bool& model_checked);

}  // namespace dtrain::trainer

#pragma once

// The checkpoint directory (--checkpoint-dir): after optimizer step s it holds model_<s>.bin (llm.c format) and
// state_<s>.bin (trainer/ckpt/state_file.h). Each file is written atomically, the model first, so a pair whose
// state file exists is complete; a crash between the two leaves a model file without a state file, which resume
// ignores. Temporary files (*.tmp.<pid>) are never mistaken for checkpoints.

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::trainer {

struct CheckpointPair {
  std::uint64_t step = 0;  // optimizer steps completed when it was written
  std::string model;       // <dir>/model_<step>.bin
  std::string state;       // <dir>/state_<step>.bin
};

CheckpointPair checkpoint_pair(const std::string& dir, std::uint64_t step);

// Every complete pair in dir, newest (highest step) first; empty if dir does not exist.
std::vector<CheckpointPair> list_checkpoints(const std::string& dir);

}  // namespace dtrain::trainer

#pragma once

// Checkpoints in the training loop: which run a checkpoint belongs to, resuming from the newest usable pair, and
// saving one from rank 0 while the other ranks wait (trainer/ckpt/ has the file formats).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "trainer/ckpt/state_file.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

// Where training starts: a fresh model, or a checkpoint that rank 0 loaded.
struct StartPoint {
  std::uint64_t step = 0;       // optimizer steps already done
  std::uint64_t data_step = 0;  // the data step the next optimizer step reads
  std::string checkpoint;       // the model file resumed from ("" when fresh)
};

// The run's shape, as the state file records it (step and data_step 0).
TrainState run_shape(const TrainOptions& options, const GptConfig& config, int seq_len, int world, std::size_t n);

// Tokens per optimizer step over all ranks and micro-steps: B*T*world*K.
std::uint64_t global_batch_tokens(const TrainState& state);

// Rank 0: loads the newest usable checkpoint pair in dir into the model and optimizer; nullopt when there is none.
// A pair that cannot be read (a file damaged after it was written) is skipped with a warning, falling back to the
// one before; a checkpoint of another model shape or global batch throws std::invalid_argument (resuming it would
// not continue the same run).
std::optional<StartPoint> load_newest_checkpoint(const std::string& dir, const TrainState& shape, Gpt& model,
                                                 AdamW& optimizer);

// Every rank: rank 0 writes model_<step>.bin then state_<step>.bin (state.step) into dir; the others wait on a
// one-float allreduce that also tells them whether it worked. Throws CheckpointError on every rank if it did not.
void save_checkpoint(Communicator& comm, const std::string& dir, const Gpt& model, const AdamW& optimizer,
                     const TrainState& state);

}  // namespace dtrain::trainer

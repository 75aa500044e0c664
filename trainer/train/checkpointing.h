#pragma once

// Checkpoints in the training loop: which run a checkpoint belongs to, resuming from the newest usable pair, and
// saving one from rank 0 while the other ranks wait (trainer/ckpt/ has the file formats).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainer/ckpt/state_file.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

// Where training starts: a fresh model, or a checkpoint that rank 0 loaded.
struct StartPoint {
  std::uint64_t step = 0;       // optimizer steps already done
  std::uint64_t data_step = 0;  // the data step the next optimizer step reads
  std::string checkpoint;       // the model file resumed from ("" when fresh)
  // fp16's AdamW step count and loss scaler (state_file.h); none when fresh or when the checkpoint has none, where
  // AdamW's step count is `step` and the scaler starts at --loss-scale-init.
  std::optional<PrecisionState> precision;
};

// Every rank gets rank 0's resumed start point: step, data_step and the precision state (not the file name).
void share_start_point(Communicator& comm, StartPoint& start);

// The run's shape, as the state file records it (step and data_step 0).
TrainState run_shape(const TrainOptions& options, const GptConfig& config, int seq_len, int world, std::size_t n);

// Tokens per optimizer step over all ranks and micro-steps: B*T*world*K.
std::uint64_t global_batch_tokens(const TrainState& state);

// Rank 0: removes what interrupted saves left in dir (checkpoint_dir.h), then loads the newest complete pair whose
// checksums verify into the model and optimizer; nullopt when dir holds no complete pair. Says on stderr what it
// found, one line per finding:
//   model_600.bin has no state file (an interrupted save): removed
//   model_500.bin + state_500.bin: <what is damaged>: skipped
//   resuming from step 400: model_400.bin + state_400.bin, checksums ok
//   no complete checkpoint in DIR: starting from step 1
// A damaged pair (a checksum that does not match: a file changed after it was written) falls back to the pair
// before it, which loses the steps in between but keeps the run going (a restart after a failure resumes by
// itself, and refusing would turn one bad file into a job that cannot restart); the damaged pair is overwritten
// when training reaches its step again. When every complete pair is damaged it throws CheckpointError instead of
// starting from step 1, which would silently discard the whole run. A checkpoint of another model shape or global
// batch throws std::invalid_argument (resuming it would not continue the same run), but only once its state file's
// checksum holds: a flipped bit in a shape field is damage, skipped like any other.
// m and v (HOST memory) receive AdamW's moments in the model's buffer layout (model.buffer_size() floats each, padding
// zeroed): the optimizer's own state (or a host mirror of it) with --zero 0, scratch that the ranks then take their shards of with --zero 1..3. The
// files do not depend on the world size or the ZeRO stage (moments are stored without padding), so a run resumes
// with another W or stage as long as the global batch is the same. The precision state comes back as the file holds
// it, whatever the run's --precision (an fp16 checkpoint's AdamW step count stays right under bf16 or fp32); an
// fp16 run resuming a checkpoint without one is told on stderr that the loss scaler starts afresh.
// With tensor or pipeline parallelism (the model's layout is not whole()) every rank loads: the model gets this
// rank's slices (of its stage) of the whole model and m, v its slices of the moments (model.buffer_size() floats each); `tidy`
// (one rank only, the world's rank 0) removes what interrupted saves left, which the other ranks' listing skips.
std::optional<StartPoint> load_newest_checkpoint(const std::string& dir, const TrainState& shape, Gpt& model,
                                                 float* m, float* v, bool tidy = true);

// Every rank: rank 0 writes model_<step>.bin then state_<step>.bin (state.step and state.precision, with the model
// file's CRC-32C)
// into dir; the others wait on a one-float allreduce that also tells them whether it worked. Throws CheckpointError
// on every rank if it did not; a model file whose state file could not be written (a full disk) is removed first,
// so that it neither holds the space the next try needs nor pairs with an older state file of the same step.
// m and v: AdamW's moments in the model's buffer layout, in HOST memory (read on rank 0 only); model.params() must be
// whole (it may be device memory: it is copied out).
void save_checkpoint(Communicator& comm, const std::string& dir, const Gpt& model, const float* m, const float* v,
                     const TrainState& state);
// save_checkpoint's collective part for a model given as `layout` (m and v in its buffer layout) and, on rank 0, the
// parameters in checkpoint order from ordered_params().
void write_checkpoint(Communicator& comm, const std::string& dir, const GptConfig& config, const ParamLayout& layout,
                      const float* m, const float* v, const TrainState& state,
                      const std::function<std::vector<float>()>& ordered_params);

// The same with tensor and pipeline parallelism, on every rank: the tensor-parallel group `tp` sums its ranks' slices
// into the stage's whole tensors (the split tensors from the rank holding each piece, the replicated ones from TP
// rank 0), then the pipeline group `pp` the stages' into the whole model and moments (wte from the first stage, not
// the last stage's tied copy), so rank 0 of `comm` (the world) writes the same files as a run without model
// parallelism, which resume at any --tp and --pp (the logical layout, as PyTorch DCP and DeepSpeed's universal
// checkpoint keep it). m and v: this rank's AdamW moments in its buffer layout, host memory.
void save_tensor_parallel_checkpoint(Communicator& comm, Communicator& tp, Communicator& pp, const std::string& dir,
                                     const Gpt& model, const float* m, const float* v, const TrainState& state);

// The same with --zero 1..3, on every rank: the moments are all-gathered from the shards (and stage 3's parameters
// gathered for the write and released after), so rank 0 writes the consolidated pair, the same files as --zero 0.
void save_zero_checkpoint(Communicator& comm, const std::string& dir, const Gpt& model, ZeroEngine& zero,
                          const TrainState& state);

}  // namespace dtrain::trainer

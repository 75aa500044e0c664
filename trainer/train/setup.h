#pragma once

// The training loop's setup steps (loop.cpp's Training constructor), in the order it takes them: CPU threads and
// the communicator, where the model's buffers live, the model shape, this rank's data, the learning-rate schedule;
// and DDP's reducer, which prepare_steps() starts.

#include <memory>

#include "trainer/comm/communicator.h"
#include "trainer/data/loader.h"
#include "trainer/model/buffers.h"
#include "trainer/model/gpt.h"
#include "trainer/model/config.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/grid/rank_grid.h"
#include "trainer/train/device.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

// Setup, first: the CPU threads (--threads, else OMP_NUM_THREADS, else every core), then the communicator for the
// device (device.h), whose rank decides who shows progress.
std::unique_ptr<Communicator> start_communicator(const TrainOptions& options, const ComputeDevice& device);

// Where the model keeps the buffers that collectives read and write, and the reducers their 16-bit copies: the
// communicator's memory (trainer/parallel/comm_buffers.h; with the shm backend, its shared segment). When it has no
// room for one, that buffer is ordinary memory and rank 0 says so once on stderr (what, why, the fix). On a GPU
// (`backend` not host-accessible): the backend's device memory.
std::unique_ptr<BufferSource> model_buffers(Communicator& comm, kernels::Backend& backend);

// The communicators of a rank's tensor-parallel group, its data-parallel group (the ranks holding the same slices),
// its pipeline group (its stage's peers: the pipeline's ranks in stage order) and, on the first and last stage with
// PP above 1, the embedding group (the two ranks holding a wte copy), made when the grid has TP or PP above 1, in that
// order on every rank (a group of one rank is the local communicator); all null without model parallelism.
struct ParallelGroups {
  std::unique_ptr<Communicator> tp;
  std::unique_ptr<Communicator> dp;
  std::unique_ptr<Communicator> pp;
  std::unique_ptr<Communicator> emb;
};
ParallelGroups start_groups(const RankGrid& grid, int rank);

// DDP's reducer over the model's gradients (--ddp-bucket-mb, --ddp-comm-dtype), its 16-bit copy from the model's
// buffers; says on the console how the gradient was cut into buckets.
std::unique_ptr<DdpReducer> start_ddp(const TrainOptions& options, Communicator& comm, Gpt& model,
                                      kernels::Dtype comm_dtype);

// The model shape the options give, with --init-from's header when there is one.
GptConfig model_config(const TrainOptions& options);

// --recompute as the model's Recompute (the option's values are checked when parsed).
Recompute recompute_mode(const TrainOptions& options);

// This rank's data, with a warning for each shard too small for one step.
DataLoader open_data(const TrainOptions& options, int B, int T, int rank, int world, const GptConfig& config);

LrSchedule lr_schedule(const TrainOptions& options);

}  // namespace dtrain::trainer

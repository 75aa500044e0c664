#pragma once

// The training run behind run_training (loop.h), split by phase over two files: start.cpp (where training starts:
// a checkpoint, --init-from or --seed, shared by every rank) and loop.cpp (set-up, the steps, checkpoints). Private
// to trainer/train/.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <list>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "trainer/ckpt/checkpoint_dir.h"
#include "trainer/ckpt/model_file.h"
#include "trainer/ckpt/state_file.h"
#include "trainer/comm/communicator.h"
#include "trainer/common/env.h"
#include "trainer/data/loader.h"
#include "trainer/data/prefetch.h"
#include "trainer/health/phase.h"
#include "trainer/health/reporter.h"
#include "trainer/health/stack_dump.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/metrics/jsonl.h"
#include "trainer/model/gpt.h"
#include "trainer/model/host_mirror.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/pipeline/schedule.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/train/checkpointing.h"
#include "trainer/train/collectives.h"
#include "trainer/train/dry_run.h"
#include "trainer/train/report/console.h"
#include "trainer/train/report/error_file.h"
#include "trainer/train/precision.h"
#include "trainer/train/setup.h"
#include "trainer/train/report/step_report.h"
#include "trainer/train/report/step_window.h"
#include "trainer/train/trial.h"

namespace dtrain::trainer {

// Where choose_start() says training starts, on every rank.
struct Start {
  StartPoint point;      // step and data_step on every rank; checkpoint only on rank 0
  bool resumed = false;  // from a checkpoint, rather than --init-from or --seed
};

// One run of the loop in loop.h, phase by phase: the constructor sets up (threads, communicator, model shape, data,
// model, optimizer); choose_start() picks a fresh start or a checkpoint and gives it to every rank; then each
// optimizer step is train_step(), report() and, every --save-every steps, save().
class Training {
 public:
  // `config`: model_config(o), resolved once by the caller (it reads --init-from's header).
  Training(const TrainOptions& o, const GptConfig& config, std::unique_ptr<HealthReporter> health)
      : o_(o),
        device_(choose_device(o.device)),
        comm_(start_communicator(o, device_)),
        buffers_(model_buffers(*comm_, *device_.backend)),
        rank_(comm_->rank()),
        world_(comm_->size()),
        grid_(parallel_layout(o, config)),
        place_(grid_.coords(rank_)),
        groups_(start_groups(grid_, rank_)),
        config_(config),
        B_(o.batch_size),
        T_(o.seq_len > 0 ? o.seq_len : config_.max_seq_len),
        K_(o.grad_accum),
        loader_(open_data(o, B_, T_, place_.dp, grid_.dp(), config_)),
        model_(config_, *device_.backend, o.zero > 0 ? grid_.dp() : 1, training_precision(o), buffers_.get(),
               TensorParallel{grid_.tp(), place_.tp, o.sequence_parallel},
               PipelineStage{grid_.pp(), place_.pp, o.pp_virtual}),
        n_(model_.num_params()),
        model_params_(ParamLayout(config_).num_params()),
        shape_(run_shape(o, config_, T_, grid_.dp(), model_params_)),
        ddp_comm_dtype_(ddp_comm_dtype(o)),
        health_(std::move(health)) {
    model_.set_tensor_parallel_group(groups_.tp.get());
    model_.set_recompute(recompute_mode(o));
    const AdamWOptions adamw{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
    if (model_.precision() == kernels::Dtype::fp16) scaling_ = std::make_unique<LossScaling>(o, *comm_, k());
    // Read (and refused when they do not fit --zero) whatever the stage.
    const ZeroDtypes dtypes{param_dtype(o), reduce_dtype(o)};
    if (o.zero > 0) {
      zero_ = std::make_unique<ZeroEngine>(o.zero, replicas(), model_, adamw, dtypes);
    } else {
      adamw_ = std::make_unique<AdamW>(model_.backend(), n_, model_.layout().decay_ranges(), adamw);
    }
  }

  // Trains from the start point to --steps, telling `trial` of each step; returns the exit code (0; a failure throws).
  int run(TrialRun& trial);

 private:
  std::uint64_t steps() const { return static_cast<std::uint64_t>(o_.steps); }
  Start choose_start();
  float load_start(bool want_resume, StartPoint& start, std::exception_ptr& failure);
  void prepare_steps(const Start& start);
  StepMetrics train_step(std::uint64_t step, const LrSchedule& schedule, StepTimes& times);
  void micro_step(int micro, float loss_scale, StepTimes& times);
  // --pp above 1 (pipeline.cpp): the schedule and the gradients' hand-over, then each step's micro-batches through
  // this stage in the schedule's order.
  void start_pipeline(const Gpt::GradsReady& inner);
  void pipeline_micro_steps(float loss_scale, StepTimes& times);
  struct PipeState;
  void pipeline_forward(const PipeOp& op, PipeState& state);
  void pipeline_backward(const PipeOp& op, float loss_scale, PipeState& state);
  // A send in flight: its own copy of what it sends (so that no activation set waits for a neighbour to take it: a
  // wait there would add a dependency the schedule does not have, and interleaved schedules deadlock on it), its Work,
  // and the phase of waiting for it.
  struct PipeSend {
    std::vector<float> data;
    std::shared_ptr<Work> work;
    const char* phase = nullptr;
  };
  void send_copy(const float* data, int peer, int stream, const char* phase);
  void receive(PipeState& state, float* data, int peer, int stream, const char* phase);
  void sum_tied();
  void report(const std::vector<WindowStep>& read, TrialRun& trial);
  void save(std::uint64_t step, std::uint64_t data_step);
  void share_moments(bool broadcast);
  kernels::Backend& k() { return model_.backend(); }
  // The ranks that hold the same slices as this one and see different data (DDP's group; the world without --tp
  // and --pp).
  Communicator& replicas() { return groups_.dp ? *groups_.dp : *comm_; }
  GradSpans reduced_spans() const;
  void clip_and_update(float lr, bool skipped);
  void clip_tensor_parallel();
  // Mixed precision: the 16-bit working copy from the fp32 master (ZeRO-3: the owned shards of both).
  void refresh_working_params() { zero_ ? zero_->refresh_working_params() : model_.refresh_working_params(); }

  const TrainOptions& o_;
  const ComputeDevice device_;  // --device (device.h)
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<BufferSource> buffers_;  // the model's and the reducers' (setup.h), dying after them
  const int rank_;
  const int world_;
  const RankGrid grid_;       // --tp, --pp: this rank's groups
  const GridCoords place_;
  ParallelGroups groups_;     // with --tp or --pp above 1 (setup.h)
  const GptConfig config_;
  const int B_, T_, K_;
  DataLoader loader_;         // of this rank's data-parallel index: a tensor-parallel group reads one batch
  Gpt model_;
  const std::size_t n_;       // this rank's parameters (its slices with --tp, its stage's with --pp)
  const std::size_t model_params_;  // the whole model's
  const TrainState shape_;
  const kernels::Dtype ddp_comm_dtype_;
  // fp16: the dynamic loss scale; AdamW's step count, which skipped steps do not advance.
  std::unique_ptr<LossScaling> scaling_;
  long optimizer_steps_ = 0;
  // One of the two: AdamW over the whole buffer (--zero 0) or the ZeRO engine with its sharded AdamW.
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<ZeroEngine> zero_;
  // --zero 1..3, resumed: the checkpoint's moments (buffer layout) until every rank has taken its shards.
  std::vector<float> resumed_m_, resumed_v_;
  // Set by prepare_steps(): what the steps use besides the model.
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<HealthReporter> health_;   // from run_training(): reporting before the communicator starts
  std::unique_ptr<DdpReducer> ddp_;
  Gpt::GradsReady grads_ready_;
  std::unique_ptr<Prefetcher> prefetch_;
  std::unique_ptr<StepWindow> window_;  // the steps not read yet (report/step_window.h)
  // --pp above 1 (pipeline.cpp): this stage's ops, the GradsReady that hands over the last micro-batch's gradients
  // only (the tied embedding's after its sum), and whether the backward running is of the last micro-batch.
  std::vector<PipeOp> schedule_;
  std::list<PipeSend> sends_;  // the sends' buffers, reused once their send has finished (pipeline.cpp)
  Gpt::GradsReady pipeline_grads_ready_, inner_grads_ready_;
  bool syncing_ = false;
  std::size_t tied_count_ = 0;  // the gradient range at 0 that waits for sum_tied()
  const char* recv_forward_phase_ = nullptr;  // lasting_phase()s naming this stage (start_pipeline)
  const char* recv_backward_phase_ = nullptr;
  const char* send_forward_phase_ = nullptr;
  const char* send_backward_phase_ = nullptr;
};

}  // namespace dtrain::trainer

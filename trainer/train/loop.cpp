#include "trainer/train/loop.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
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
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/train/checkpointing.h"
#include "trainer/train/collectives.h"
#include "trainer/train/console.h"
#include "trainer/train/error_file.h"
#include "trainer/train/precision.h"
#include "trainer/train/setup.h"
#include "trainer/train/step_report.h"
#include "trainer/train/trial.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// An integer from the environment that configures the run: unset gives `fallback`; a value that is not an integer
// is a bad option (std::invalid_argument, exit code 2) rather than a silent fallback.
int env_setting(const char* name, int fallback, const std::string& hint) {
  const Result<int> value = env_int(name, fallback, hint);
  if (!value.ok()) throw std::invalid_argument(value.status.message());
  return value.value;
}

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
  Training(const TrainOptions& o, std::unique_ptr<HealthReporter> health)
      : o_(o),
        comm_(start_communicator(o)),
        buffers_(model_buffers(*comm_)),
        rank_(comm_->rank()),
        world_(comm_->size()),
        config_(model_config(o)),
        B_(o.batch_size),
        T_(o.seq_len > 0 ? o.seq_len : config_.max_seq_len),
        K_(o.grad_accum),
        loader_(open_data(o, B_, T_, rank_, world_, config_)),
        model_(config_, kernels::cpu_backend(), o.zero > 0 ? world_ : 1, training_precision(o), buffers_.get()),
        n_(model_.num_params()),
        shape_(run_shape(o, config_, T_, world_, n_)),
        ddp_comm_dtype_(ddp_comm_dtype(o)),
        health_(std::move(health)) {
    const AdamWOptions adamw{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
    if (model_.precision() == kernels::Dtype::fp16) scaling_ = std::make_unique<LossScaling>(o, *comm_, k());
    // Read (and refused when they do not fit --zero) whatever the stage.
    const ZeroDtypes dtypes{param_dtype(o), reduce_dtype(o)};
    if (o.zero > 0) {
      zero_ = std::make_unique<ZeroEngine>(o.zero, *comm_, model_, adamw, dtypes);
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
  void micro_step(int micro, float loss_scale, StepTimes& times, double& loss_sum);
  void save(std::uint64_t step, std::uint64_t data_step);
  void share_moments();
  kernels::Backend& k() { return model_.backend(); }
  GradSpans reduced_spans() const;
  float clip_and_update(float lr, bool skipped);
  // Mixed precision: the 16-bit working copy from the fp32 master (ZeRO-3: the owned shards of both).
  void refresh_working_params() { zero_ ? zero_->refresh_working_params() : model_.refresh_working_params(); }

  const TrainOptions& o_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<BufferSource> buffers_;  // the model's and the reducers' (setup.h), dying after them
  const int rank_;
  const int world_;
  const GptConfig config_;
  const int B_, T_, K_;
  DataLoader loader_;
  Gpt model_;
  const std::size_t n_;
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
};

int Training::run(TrialRun& trial) {
  const Start start = choose_start();
  const LrSchedule schedule = lr_schedule(o_);
  spdlog::info("model {} ({} parameters), batch {} x seq {} x world {} x accum {} = {} tokens per step, {} "
               "threads, backend {}, comm {}",
               config_.describe(), n_, B_, T_, world_, K_, global_batch_tokens(shape_), kernels::cpu_threads(),
               model_.backend().name(), comm_->backend());
  if (start.resumed && !o_.init_from.empty()) {
    spdlog::info("--init-from {} is not used: training resumes from {}", o_.init_from, start.point.checkpoint);
  }
  if (start.point.step >= steps()) {
    spdlog::info("the checkpoint is at step {}, --steps is {}: nothing to do", start.point.step, o_.steps);
    return 0;
  }
  prepare_steps(start);
  std::uint64_t data_step = start.point.data_step;
  for (std::uint64_t step = start.point.step; step < steps(); ++step) {
    // --debug-stall-step (tests): stuck before the step's collectives while the reporter's heartbeats go on; with
    // --debug-stall-rank only that rank, so the others wait for it inside the step's first collective.
    const bool stall = static_cast<long>(step) + 1 == o_.debug_stall_step &&
                       (o_.debug_stall_rank < 0 || o_.debug_stall_rank == rank_);
    if (stall) set_phase("stalled (--debug-stall-step)");
    while (stall) std::this_thread::sleep_for(std::chrono::seconds(1));
    StepTimes times;
    const StepMetrics m = train_step(step, schedule, times);
    trial.record(m, times, *comm_, shape_);
    ++data_step;
    report_step(m, times, {metrics_.get(), health_.get(), rank_, world_, o_.log_every, o_.steps, n_,
                           model_flops_per_token(config_, T_, n_)});
    if (o_.save_every > 0 && (m.step % static_cast<std::uint64_t>(o_.save_every) == 0 || m.step == steps())) {
      set_phase("checkpoint");
      save(m.step, data_step);
    }
  }
  return 0;
}

// Rank 0 decides where to start and loads it; every rank then gets its step and data step, rank 0's weights and,
// when resumed, its AdamW moments.
Start Training::choose_start() {
  set_phase("start (loading and broadcasting the weights)");
  const int restart_count =
      env_setting("TORCHELASTIC_RESTART_COUNT", 0,
                  "the launcher (dtrain run/launch, torchrun) sets it to the number of restarts so far");
  // A restarted job resumes by itself when it saves checkpoints (or finds some), as if --resume had been given.
  const bool want_resume =
      o_.resume || (restart_count > 0 && (o_.save_every > 0 || !list_checkpoints(o_.checkpoint_dir).empty()));
  StartPoint start;
  std::exception_ptr failure;
  // 1 resumed, 0 fresh, -1 failed (every rank then stops).
  float status = rank_ == 0 ? load_start(want_resume, start, failure) : 0;
  status = broadcast_float(*comm_, status);
  if (status < 0) {
    if (rank_ == 0) std::rethrow_exception(failure);
    throw std::runtime_error("rank 0 could not load the starting weights; see rank 0's log");
  }
  if (status > 0) share_start_point(*comm_, start);
  if (world_ > 1) comm_->broadcast(model_.params(), model_.buffer_size(), 0)->wait();
  if (status > 0) share_moments();
  // The 16-bit working copy: the ZeRO engine makes it as it shards.
  if (zero_) {
    zero_->shard_params();
  } else {
    model_.refresh_working_params();
  }
  optimizer_steps_ = static_cast<long>(start.precision ? start.precision->adam_steps : start.step);
  if (scaling_ && start.precision) scaling_->restore(*start.precision);
  return {start, status > 0};
}

// Resumed: every rank gets rank 0's AdamW moments (with --zero 1..3, its shards of them).
void Training::share_moments() {
  if (!zero_) {
    if (world_ > 1) {
      comm_->broadcast(adamw_->m(), n_, 0)->wait();
      comm_->broadcast(adamw_->v(), n_, 0)->wait();
    }
    return;
  }
  resumed_m_.resize(model_.buffer_size());
  resumed_v_.resize(model_.buffer_size());
  if (world_ > 1) {
    comm_->broadcast(resumed_m_.data(), resumed_m_.size(), 0)->wait();
    comm_->broadcast(resumed_v_.data(), resumed_v_.size(), 0)->wait();
  }
  zero_->load_moments(resumed_m_.data(), resumed_v_.data());
  resumed_m_ = {};
  resumed_v_ = {};
}

// Rank 0: the newest checkpoint when resuming and there is one, else --init-from's weights, else init_weights(--seed).
// Returns choose_start's status: 1 resumed (`start` is the checkpoint's), 0 fresh, -1 failed (`failure` says why).
float Training::load_start(bool want_resume, StartPoint& start, std::exception_ptr& failure) {
  try {
    std::optional<StartPoint> resumed;
    if (want_resume) {
      if (zero_) {
        resumed_m_.resize(model_.buffer_size());
        resumed_v_.resize(model_.buffer_size());
      }
      float* m = zero_ ? resumed_m_.data() : adamw_->m();
      float* v = zero_ ? resumed_v_.data() : adamw_->v();
      resumed = load_newest_checkpoint(o_.checkpoint_dir, shape_, model_, m, v);
    }
    if (resumed) {
      start = *resumed;
      return 1;
    }
    if (!o_.init_from.empty()) {
      std::vector<float> ordered(n_);
      read_model_file(o_.init_from, config_, ordered.data(), n_);
      model_.layout().from_checkpoint_order(ordered.data(), model_.params());
    } else {
      model_.init_weights(o_.seed);
    }
    return 0;
  } catch (const std::exception&) {
    failure = std::current_exception();
    return -1;
  }
}

// What the steps use besides the model: the metrics file (rank 0; a resumed run first drops the lines of the steps it
// repeats), ZeRO's gradient reports (any world size), DDP (more than one rank) and the prefetcher from the start's data step.
void Training::prepare_steps(const Start& start) {
  if (rank_ == 0 && !o_.metrics.empty()) {
    if (start.resumed) drop_metrics_after(o_.metrics, start.point.step);
    metrics_ = std::make_unique<MetricsWriter>(o_.metrics);
  }
  if (zero_) {
    // ZeRO's engine runs at any world size (one rank holds every shard): backward must report to it, as it does on
    // more ranks, or its finish_backward refuses the step.
    grads_ready_ = zero_->grads_ready();
  } else if (world_ > 1) {
    ddp_ = start_ddp(o_, *comm_, model_, ddp_comm_dtype_);
    grads_ready_ = [this](std::size_t offset, std::size_t count) { ddp_->grads_ready(offset, count); };
  }
  prefetch_ = std::make_unique<Prefetcher>(loader_, start.point.data_step, 2 * static_cast<std::size_t>(K_));
}

// One optimizer step (0-based `step`): K micro-steps of forward and backward, the loss over all ranks, loss
// scaling (fp16), clipping and AdamW; returns what it measured, and in `times` where the time went.
StepMetrics Training::train_step(std::uint64_t step, const LrSchedule& schedule, StepTimes& times) {
  const Clock::time_point began = Clock::now();
  const CommTime comm_at_start = comm_time();
  // ZeRO reduce-scatters sum over ranks: each rank's gradients are divided by W up front.
  float loss_scale = 1.0f / static_cast<float>(zero_ ? K_ * world_ : K_);
  if (scaling_) loss_scale *= scaling_->scale();
  const float scale_used = scaling_ ? scaling_->scale() : 1.0f;
  if (zero_) {
    zero_->zero_grad();
  } else {
    model_.zero_grad();
  }
  double loss_sum = 0;
  for (int micro = 0; micro < K_; ++micro) micro_step(micro, loss_scale, times, loss_sum);
  const float loss = timed("reduce (the loss allreduce)", times, &StepTimes::comm_exposed_ms, [&] {
    return allreduce_sum(*comm_, static_cast<float>(loss_sum / K_)) / static_cast<float>(world_);
  });

  StepMetrics m;
  m.step = step + 1;
  m.loss = loss;
  m.lr = schedule.at(static_cast<long>(step));
  m.grad_norm = timed("optimizer", times, &StepTimes::optimizer_ms, [&] {
    const bool skipped = scaling_ && scaling_->finish(step + 1, model_.grads(), reduced_spans());
    if (scaling_) m.skipped = skipped;
    return clip_and_update(static_cast<float>(m.lr), skipped);
  });
  if (scaling_) m.loss_scale = scale_used;
  m.step_ms = ms_since(began);
  m.tokens_per_s = static_cast<double>(global_batch_tokens(shape_)) / (m.step_ms / 1000.0);
  measure_comm_and_memory(m, times, comm_at_start, ddp_.get(), zero_.get(), model_.activation_bytes(), world_);
  return m;
}

// One micro-step: its batch, forward, backward and, on the last, the wait for the gradient reductions that backward
// did not hide (DDP's allreduces, ZeRO's reduce-scatters), each timed into `times`. The communication that backward
// overlaps counts as compute: it cost the step nothing; what forward or backward wait for (ZeRO-3's all-gathers)
// is exposed communication (timed, trainer/metrics/step_times.h).
void Training::micro_step(int micro, float loss_scale, StepTimes& times, double& loss_sum) {
  Batch batch = timed("data", times, &StepTimes::data_wait_ms, [&] { return prefetch_->next(); });
  loss_sum += timed("forward", times, &StepTimes::compute_ms,
                    [&] { return model_.forward(batch.inputs(), batch.targets(), B_, T_); });
  timed("backward", times, &StepTimes::compute_ms, [&] {
    if (ddp_) ddp_->begin_backward(micro == K_ - 1);
    if (zero_) zero_->begin_backward(micro == K_ - 1);
    model_.backward(loss_scale, grads_ready_);
  });
  timed("reduce (waiting for the gradient reductions)", times, &StepTimes::comm_exposed_ms, [&] {
    if (ddp_) ddp_->finish_backward();
    if (zero_) zero_->finish_backward();
  });
}

// The gradient ranges this rank holds reduced: the whole buffer (DDP), or its owned shards (ZeRO).
GradSpans Training::reduced_spans() const {
  if (!zero_) return {{0, n_}};
  GradSpans spans;
  for (const ShardSpan& own : zero_->shards().owned()) spans.emplace_back(own.offset, own.count);
  return spans;
}

// Clipping, then AdamW unless the loss scaler skips the step, then the 16-bit working copy; returns the norm.
float Training::clip_and_update(float lr, bool skipped) {
  float grad_norm = 0;
  if (zero_) {
    grad_norm = zero_->clip_grad_norm(o_.grad_clip);
    if (!skipped) zero_->step(lr, optimizer_steps_ + 1);
  } else {
    grad_norm = clip_grad_norm(k(), model_.grads(), n_, o_.grad_clip);
    if (!skipped) adamw_->step(model_.params(), model_.grads(), lr, optimizer_steps_ + 1);
  }
  if (!skipped) {
    ++optimizer_steps_;
    refresh_working_params();
  }
  return grad_norm;
}

// A checkpoint after optimizer step `step`, whose successor reads data step `data_step`.
void Training::save(std::uint64_t step, std::uint64_t data_step) {
  TrainState state = shape_;
  state.step = step;
  state.data_step = data_step;
  if (scaling_) state.precision = scaling_->checkpoint_state(static_cast<std::uint64_t>(optimizer_steps_));
  if (zero_) {
    save_zero_checkpoint(*comm_, o_.checkpoint_dir, model_, *zero_, state);
  } else {
    save_checkpoint(*comm_, o_.checkpoint_dir, model_, adamw_->m(), adamw_->v(), state);
  }
}

}  // namespace

int run_training(const TrainOptions& options) {
  TrialRun trial;  // with DTRAIN_TUNE_TRIAL (trial.h), a trial's options, and its line at the end whatever the code
  try {
    // The reporter first: the launcher hears this worker is starting (health.startup_timeout_s) while the
    // communicator may still wait for its peers.
    // And the dump of phase and collectives on the agent's signal, for the evidence of a hang (stack_dump.h).
    install_stack_dump();
    trial = TrialRun(options);
    return trial.end(Training(trial.options(), HealthReporter::from_env()).run(trial));
  } catch (const std::invalid_argument& e) {
    spdlog::error("{}", e.what());
    write_error_file(e.what());
    return trial.end(2);
  } catch (const std::exception& e) {
    std::string rank = std::getenv("RANK") ? std::string(" (rank ") + std::getenv("RANK") + ")" : "";
    spdlog::error("training failed{}: {}", rank, e.what());
    write_error_file(e.what());
    return trial.end(1);
  }
}

}  // namespace dtrain::trainer

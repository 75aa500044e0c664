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
#include "trainer/common/host_wait.h"
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
#include "trainer/parallel/tp/grad_norm.h"
#include "trainer/parallel/zero/engine.h"
#include "trainer/train/checkpointing.h"
#include "trainer/train/collectives.h"
#include "trainer/train/dry_run.h"
#include "trainer/train/report/console.h"
#include "trainer/train/report/error_file.h"
#include "trainer/train/precision.h"
#include "trainer/train/setup.h"
#include "trainer/train/report/step_report.h"
#include "trainer/train/training.h"
#include "trainer/train/report/step_window.h"
#include "trainer/train/trial.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace


int Training::run(TrialRun& trial) {
  const Start start = choose_start();
  const LrSchedule schedule = lr_schedule(o_);
  spdlog::info("model {} ({} parameters), batch {} x seq {} x world {} x accum {} = {} tokens per step, {} "
               "threads, device {}, comm {}",
               config_.describe(), model_params_, B_, T_, grid_.dp(), K_, global_batch_tokens(shape_),
               kernels::cpu_threads(), device_.name(), comm_->backend());
  if (grid_.tp() > 1 || grid_.pp() > 1) {
    const std::string pipeline =
        grid_.pp() > 1 ? fmt::format(", {} schedule over {} micro-batches", o_.pp_schedule, K_) : std::string();
    spdlog::info("tensor parallel {} x pipeline parallel {} x data parallel {}: {} parameters on rank {} (stage {}, "
                 "layers [{}, {}){}; groups over tp {}, dp {}, pp {})",
                 grid_.tp(), grid_.pp(), grid_.dp(), n_, rank_, place_.pp, model_.layout().first_layer(),
                 model_.layout().first_layer() + model_.layout().stage_layers(), pipeline, groups_.tp->backend(),
                 groups_.dp->backend(), groups_.pp->backend());
  }
  if (start.resumed && !o_.init_from.empty()) {
    spdlog::info("--init-from {} is not used: training resumes from {}", o_.init_from, start.point.checkpoint);
  }
  if (start.point.step >= steps()) {
    spdlog::info("the checkpoint is at step {}, --steps is {}: nothing to do", start.point.step, o_.steps);
    return 0;
  }
  prepare_steps(start);
  trial.set_device(device_.cuda ? "cuda" : "cpu");
  std::uint64_t data_step = start.point.data_step;
  const SyncDebug sync_debug = sync_debug_from_env();
  for (std::uint64_t step = start.point.step; step < steps(); ++step) {
    // --debug-stall-step (tests): stuck before the step's collectives while the reporter's heartbeats go on; with
    // --debug-stall-rank only that rank, so the others wait for it inside the step's first collective.
    const bool stall = static_cast<long>(step) + 1 == o_.debug_stall_step &&
                       (o_.debug_stall_rank < 0 || o_.debug_stall_rank == rank_);
    if (stall) set_phase("stalled (--debug-stall-step)");
    while (stall) std::this_thread::sleep_for(std::chrono::seconds(1));
    StepTimes times;
    StepMetrics m;
    {
      const HostWaitCheck check(sync_debug);  // DTRAIN_SYNC_DEBUG (common/host_wait.h)
      m = train_step(step, schedule, times);
    }
    window_->close_step(m, times);
    ++data_step;
    const bool saving =
        o_.save_every > 0 && (m.step % static_cast<std::uint64_t>(o_.save_every) == 0 || m.step == steps());
    if (window_->due(m.step, steps(), saving)) report(window_->read(), trial);
    if (saving) {
      set_phase("checkpoint");
      save(m.step, data_step);
    }
  }
  return 0;
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
  } else if (replicas().size() > 1) {
    ddp_ = start_ddp(o_, replicas(), model_, ddp_comm_dtype_);
    grads_ready_ = [this](std::size_t offset, std::size_t count) { ddp_->grads_ready(offset, count); };
  }
  if (grid_.pp() > 1) start_pipeline(grads_ready_);
  prefetch_ = std::make_unique<Prefetcher>(loader_, start.point.data_step, 2 * static_cast<std::size_t>(K_), &k());
  window_ = std::make_unique<StepWindow>(k(), *comm_, K_, o_.log_every);
}

// The steps a window read gives (report/step_window.h), in order: the trial's record, then the metrics line, the
// console line and the health report.
void Training::report(const std::vector<WindowStep>& read, TrialRun& trial) {
  for (const WindowStep& s : read) {
    trial.record(s.metrics, s.times, *comm_, shape_, window_->deferred());
    report_step(s.metrics, s.times,
                {metrics_.get(), health_.get(), rank_, world_, o_.log_every, o_.steps, n_,
                 model_flops_per_token(config_, T_, model_params_), k().device_name(), grid_.tp(), grid_.pp(),
                 place_.tp, place_.pp});
  }
}

// One optimizer step (0-based `step`): K micro-steps of forward and backward, the loss over all ranks, loss
// scaling (fp16), clipping and AdamW; returns what it measured, and in `times` where the time went. The loss and
// the gradient norm stay in the window's slots (report/step_window.h) until it is read.
StepMetrics Training::train_step(std::uint64_t step, const LrSchedule& schedule, StepTimes& times) {
  const Clock::time_point began = Clock::now();
  const CommTime comm_at_start = comm_time();
  // ZeRO reduce-scatters sum over the data-parallel ranks: each rank's gradients are divided by their count up front.
  float loss_scale = 1.0f / static_cast<float>(zero_ ? K_ * grid_.dp() : K_);
  if (scaling_) loss_scale *= scaling_->scale();
  const float scale_used = scaling_ ? scaling_->scale() : 1.0f;
  if (zero_) {
    zero_->zero_grad();
  } else {
    model_.zero_grad();
  }
  if (grid_.pp() > 1) {
    pipeline_micro_steps(loss_scale, times);
  } else {
    for (int micro = 0; micro < K_; ++micro) micro_step(micro, loss_scale, times);
  }
  timed("reduce (the loss allreduce)", times, &StepTimes::comm_exposed_ms, [&] {
    float* loss = window_->loss();
    k().mean_of(loss, window_->micro_losses(), static_cast<std::size_t>(K_));
    // With --pp the last stage's loss (the others hold 0) to every stage first (a host backend: check_parallel_flags).
    if (grid_.pp() > 1) wait_collective(groups_.pp->allreduce(loss, 1), "pp-allreduce (the last stage's loss)");
    if (world_ > 1) wait_collective(comm_->allreduce(loss, 1), "allreduce (the loss)");
  });

  StepMetrics m;
  m.step = step + 1;
  m.lr = schedule.at(static_cast<long>(step));
  timed("optimizer", times, &StepTimes::optimizer_ms, [&] {
    const bool skipped = scaling_ && scaling_->finish(step + 1, model_.grads(), reduced_spans());
    if (scaling_) m.skipped = skipped;
    clip_and_update(static_cast<float>(m.lr), skipped);
  });
  if (scaling_) m.loss_scale = scale_used;
  m.step_ms = ms_since(began);
  m.tokens_per_s = static_cast<double>(global_batch_tokens(shape_)) / (m.step_ms / 1000.0);
  measure_comm_and_memory(m, times, comm_at_start, ddp_.get(), zero_.get(), model_.activation_bytes(), world_);
  if (!zero_ && groups_.tp) {
    // --tp / --pp without ZeRO: this rank's whole buffers (its slices of its stage), for `dtrain plan
    // --trainer-accounting`'s comparison: fp32 parameters (and the 16-bit working copy), gradients, AdamW's m and v.
    const std::uint64_t floats = model_.buffer_size();
    const std::uint64_t half = model_.precision() == kernels::Dtype::fp32 ? 0 : 2 * floats;
    m.sharding = ShardingMetrics{4 * floats + half, 4 * floats, 8 * static_cast<std::uint64_t>(n_),
                                 model_.activation_bytes(), std::nullopt};
  }
  return m;
}

// One micro-step: its batch, forward, backward and, on the last, the wait for the gradient reductions that backward
// did not hide (DDP's allreduces, ZeRO's reduce-scatters), each timed into `times`. The communication that backward
// overlaps counts as compute: it cost the step nothing; what forward or backward wait for (ZeRO-3's all-gathers)
// is exposed communication (timed, trainer/metrics/step_times.h). The batch's ids are copied asynchronously and its
// buffer is free again once the device has passed the fence recorded after forward.
void Training::micro_step(int micro, float loss_scale, StepTimes& times) {
  Batch batch = timed("data", times, &StepTimes::data_wait_ms, [&] { return prefetch_->next(); });
  timed("forward", times, &StepTimes::compute_ms, [&] {
    model_.forward_batch(batch.tokens.data(), B_, T_, window_->micro_losses() + micro);
    batch.tokens.free_after(k().record_fence());
  });
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

// Clipping (the norm to the window's slot), then AdamW unless the loss scaler skips the step, then the 16-bit
// working copy.
void Training::clip_and_update(float lr, bool skipped) {
  if (groups_.tp) {
    clip_tensor_parallel();
  } else if (zero_) {
    zero_->clip_grad_norm_to(o_.grad_clip, window_->norm());
  } else {
    clip_grad_norm_to(k(), model_.grads(), n_, o_.grad_clip, window_->norm(), window_->scratch());
  }
  if (!skipped) {
    if (zero_) {
      zero_->step(lr, optimizer_steps_ + 1);
    } else {
      adamw_->step(model_.params(), model_.grads(), lr, optimizer_steps_ + 1);
    }
    ++optimizer_steps_;
    refresh_working_params();
  }
}

// Clipping with --tp or --pp (a host backend: check_parallel_flags, so the window's slots are host memory): the whole
// model's norm over the gradients this rank holds reduced, the split tensors' squares summed over the tensor-parallel
// group and the replicated ones counted once; with ZeRO, from the owned shards, summed over the data-parallel group
// first (tp/grad_norm.h); then the stages' sums added over the pipeline group (the tied wte copy counted once).
void Training::clip_tensor_parallel() {
  const GradSpans spans = reduced_spans();
  if (zero_) {
    std::vector<ParamRange> owned;
    for (const auto& [offset, count] : spans) owned.push_back({offset, count});
    *window_->scratch() =
        sharded_tensor_parallel_sum_squares(k(), replicas(), *groups_.tp, model_.layout(), model_.grads(), owned);
  } else {
    *window_->scratch() = tensor_parallel_sum_squares(k(), *groups_.tp, model_.layout(), model_.grads());
  }
  *window_->scratch() = sum_over_group(*groups_.pp, *window_->scratch(), "pp-all-gather (the stages' gradient norms)");
  k().norm_of(window_->norm(), window_->scratch());
  for (const auto& [offset, count] : spans) k().clip_to(model_.grads() + offset, count, window_->norm(), o_.grad_clip);
}

// A checkpoint after optimizer step `step`, whose successor reads data step `data_step`.
void Training::save(std::uint64_t step, std::uint64_t data_step) {
  TrainState state = shape_;
  state.step = step;
  state.data_step = data_step;
  if (scaling_) state.precision = scaling_->checkpoint_state(static_cast<std::uint64_t>(optimizer_steps_));
  if (zero_ && groups_.tp) {
    std::vector<float> m, v;  // this rank's slices, gathered from the data-parallel group's shards
    zero_->gather_moments(m, v);
    zero_->gather_params();  // stage 3: this rank's slices whole for the write, released after
    try {
      save_tensor_parallel_checkpoint(*comm_, *groups_.tp, *groups_.pp, o_.checkpoint_dir, model_, m.data(), v.data(),
                                      state);
    } catch (...) {
      zero_->release_params();
      throw;
    }
    zero_->release_params();
  } else if (zero_) {
    save_zero_checkpoint(*comm_, o_.checkpoint_dir, model_, *zero_, state);
  } else if (groups_.tp) {
    const HostMirror m(k(), adamw_->m(), n_), v(k(), adamw_->v(), n_);  // every rank's slices
    save_tensor_parallel_checkpoint(*comm_, *groups_.tp, *groups_.pp, o_.checkpoint_dir, model_, m.data(), v.data(),
                                    state);
  } else {
    // Rank 0 writes the moments: only it copies them to the host.
    const std::size_t count = rank_ == 0 ? n_ : 0;
    const HostMirror m(k(), adamw_->m(), count), v(k(), adamw_->v(), count);
    save_checkpoint(*comm_, o_.checkpoint_dir, model_, m.data(), v.data(), state);
  }
}


int run_training(const TrainOptions& options) {
  TrialRun trial;  // with DTRAIN_TUNE_TRIAL (trial.h), a trial's options, and its line at the end whatever the code
  try {
    // The reporter first: the launcher hears this worker is starting (health.startup_timeout_s) while the
    // communicator may still wait for its peers.
    // And the dump of phase and collectives on the agent's signal, for the evidence of a hang (stack_dump.h).
    if (options.dry_run) return dry_run(options);
    // --tp/--pp checked (and refused above 1) before any rank waits for its peers.
    const GptConfig config = model_config(options);
    check_parallel_flags(options, config);
    install_stack_dump();
    trial = TrialRun(options);
    return trial.end(Training(trial.options(), config, HealthReporter::from_env()).run(trial));
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

// A training step's micro-batches through this rank's pipeline stage (--pp above 1; training.h).

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/parallel/pipeline/schedule.h"
#include "trainer/train/training.h"

namespace dtrain::trainer {
namespace {

// Runs `wait` (outside timed(), so none of it counts as exposed communication) and counts its time as the pipeline's
// bubble (step_times.h).
template <class Wait>
void as_bubble(StepTimes& times, Wait&& wait) {
  const auto began = std::chrono::steady_clock::now();
  wait();
  times.bubble_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
}

}  // namespace

// The schedule's ops in order (--pp-schedule; trainer/parallel/pipeline/schedule.h), micro-batch i in activation set
// i % sets: a stage keeps at most `sets` micro-batches between their forward and their backward, consecutive ones
// (both run in micro-batch order), so no two of them share a set. A stage after the first receives its input from
// the stage before it and one before the last its output's gradient from the stage after it, each waited for where
// the op needs it ("pp-recv": the time a stage waits for its neighbour, the pipeline's bubble, plus the transfer);
// the sends go out asynchronously and are waited for only before their buffers' set is used again, and at the end of
// the step ("pp-send"). The DDP / ZeRO reduction and the tied embedding's sum run with the last backward
// (tied_grads_ready below).
void Training::pipeline_micro_steps(float loss_scale, StepTimes& times) {
  const PipelineStage stage = model_.layout().pipeline_stage();
  Communicator& pp = *groups_.pp;
  const std::size_t count = model_.stage_floats(B_, T_);  // this rank's tokens' activations (sequence parallel: 1/T)
  const int sets = model_.activation_sets();
  // Each set's sends in flight, with the phase of waiting for them.
  std::vector<std::vector<std::pair<std::shared_ptr<Work>, const char*>>> sending(static_cast<std::size_t>(sets));
  auto settle = [&](int set) {
    for (const auto& [work, phase] : sending[static_cast<std::size_t>(set)]) {
      timed(phase, times, &StepTimes::comm_exposed_ms, [&] { wait_collective(*work); });
    }
    sending[static_cast<std::size_t>(set)].clear();
  };
  auto receive = [&](float* data, int peer, const char* phase) {
    set_phase(phase);
    as_bubble(times, [&] { wait_collective(*pp.recv(data, count, peer)); });
  };
  int backwards = 0;
  for (const PipeOp& op : schedule_) {
    const int set = op.micro % sets;
    settle(set);
    model_.use_activation_set(set);
    if (op.kind == PipeOp::forward) {
      Batch batch = timed("data", times, &StepTimes::data_wait_ms, [&] { return prefetch_->next(); });
      if (!stage.first()) receive(model_.stage_input(B_, T_), stage.rank - 1, recv_forward_phase_);
      timed("forward", times, &StepTimes::compute_ms, [&] {
        model_.forward_batch(batch.tokens.data(), B_, T_, window_->micro_losses() + op.micro);
        batch.tokens.free_after(k().record_fence());
      });
      if (!stage.last())
        sending[set].emplace_back(pp.send(model_.stage_output(), count, stage.rank + 1), send_forward_phase_);
      continue;
    }
    if (!stage.last()) receive(model_.stage_output_grad(), stage.rank + 1, recv_backward_phase_);
    const bool last = ++backwards == K_;
    timed("backward", times, &StepTimes::compute_ms, [&] {
      if (ddp_) ddp_->begin_backward(last);
      if (zero_) zero_->begin_backward(last);
      syncing_ = last;
      model_.backward(loss_scale, pipeline_grads_ready_);
    });
    if (!stage.first()) sending[set].emplace_back(pp.send(model_.stage_input_grad(), count, stage.rank - 1),
                                                    send_backward_phase_);
    // The last stage's wait in the tied sum is for the first stage's last backward: the pipeline's drain, a bubble.
    if (last) as_bubble(times, [&] { sum_tied(); });
    timed("reduce (waiting for the gradient reductions)", times, &StepTimes::comm_exposed_ms, [&] {
      if (ddp_) ddp_->finish_backward();
      if (zero_) zero_->finish_backward();
    });
  }
  for (int set = 0; set < sets; ++set) settle(set);
}

// The gradients' reduction with pipeline parallelism: the model's GradsReady, except that on the first and last stage,
// in the step's last backward, the range that starts at 0 (wte, which backward hands over last) waits for sum_tied().
// The tied gradient is summed before the data-parallel reduction sees it, so that DDP's buckets and ZeRO's shards (cut
// differently on the two stages) reduce it whole; and after the stage has sent its input's gradient on, since the
// first stage's last backward needs that gradient before it can join the sum.
void Training::start_pipeline(const Gpt::GradsReady& inner) {
  const PipeSchedule schedule = parse_pipe_schedule(o_.pp_schedule);
  const int P = grid_.pp(), stage = place_.pp;
  schedule_ = pipeline_schedule(schedule, P, stage, K_);
  model_.set_activation_sets(activation_sets(schedule, P, stage, K_));
  inner_grads_ready_ = inner;
  // The phases name the stage and its neighbours (health/phase.h; a hang's evidence shows where each rank waits).
  const std::string here = "stage " + std::to_string(stage) + " of " + std::to_string(P) + ", tensor-parallel rank " +
                           std::to_string(place_.tp);
  recv_forward_phase_ =
      lasting_phase("pp-recv (" + here + " waits for stage " + std::to_string(stage - 1) + "'s activations)");
  recv_backward_phase_ =
      lasting_phase("pp-recv (" + here + " waits for stage " + std::to_string(stage + 1) + "'s gradient)");
  send_forward_phase_ =
      lasting_phase("pp-send (" + here + " waits for stage " + std::to_string(stage + 1) + " to take its activations)");
  send_backward_phase_ =
      lasting_phase("pp-send (" + here + " waits for stage " + std::to_string(stage - 1) + " to take its gradient)");
  pipeline_grads_ready_ = [this](std::size_t offset, std::size_t count) {
    if (offset == 0 && syncing_ && groups_.emb) {
      tied_count_ = count;
    } else if (inner_grads_ready_) {
      inner_grads_ready_(offset, count);
    }
  };
}

// Megatron-LM's embedding allreduce: the two wte copies' gradients summed over the embedding group (first and last
// stage), then handed to the data-parallel reduction.
void Training::sum_tied() {
  if (!groups_.emb) return;
  const ParamRange wte = model_.layout().wte();
  wait_collective(*groups_.emb->allreduce(model_.grads() + wte.offset, wte.count),
                  "pp-allreduce (the tied embedding's gradient, first and last stage)");
  if (inner_grads_ready_) inner_grads_ready_(0, tied_count_);
}

}  // namespace dtrain::trainer

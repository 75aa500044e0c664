// A training step's micro-batches through this rank's pipeline stage (--pp above 1; training.h).

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainer/health/phase.h"
#include "trainer/metrics/comm_time.h"
#include "trainer/parallel/pipeline/schedule.h"
#include "trainer/train/training.h"

namespace dtrain::trainer {
namespace {

// The point-to-point streams (communicator.h): activations go forward on one, their gradients back on the other, each
// in its own order.
constexpr int kActivations = 0;
constexpr int kGradients = 1;

// Runs `wait` (outside timed(), so none of it counts as exposed communication) and counts its time as the pipeline's
// bubble (step_times.h).
template <class Wait>
void as_bubble(StepTimes& times, Wait&& wait) {
  const auto began = std::chrono::steady_clock::now();
  wait();
  times.bubble_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
}

}  // namespace

// One step's state of the pipeline (pipeline_micro_steps): which activation set each micro-batch in flight holds per
// model chunk, and the step's part in the gradients' reduction.
struct Training::PipeState {
  PipeState(int sets, StepTimes& step_times) : times(step_times) {
    for (int s = sets - 1; s >= 0; --s) free_sets.push_back(s);
  }
  std::map<std::pair<int, int>, int> set_of;  // (micro-batch, chunk) -> its activation set
  std::map<int, Batch> batches;  // micro-batch -> its tokens, from its first chunk's forward to its last's
  std::vector<int> free_sets;
  bool reducing = false;  // the reducers' one pass (the last micro-batch's backwards) has begun
  int finals_left = 0;    // backwards of the last micro-batch still to run, one per chunk
  StepTimes& times;
};

// The schedule's ops in order (--pp-schedule, --pp-virtual; trainer/parallel/pipeline/schedule.h). A (micro-batch,
// chunk) takes a free activation set at its forward and gives it back at its backward: the schedule keeps at most
// model_.activation_sets() of them in flight. A chunk after the pipeline's first receives its input from the rank
// before (the last rank for this rank's later chunks) and one before the pipeline's last its output's gradient from
// the rank after, each waited for where the op needs it ("pp-recv": the time a stage waits for its neighbour, the
// pipeline's bubble, plus the transfer); the sends go out asynchronously from copies (PipeSend) and are waited for at
// the end of the step ("pp-send"). Gradients reach DDP / ZeRO in one pass: every chunk's backward of the last
// micro-batch hands them over (in decreasing offset order, chunk by chunk), then the tied embedding's sum and the
// reducers' wait.
void Training::pipeline_micro_steps(float loss_scale, StepTimes& times) {
  PipeState state(model_.activation_sets(), times);
  state.finals_left = model_.layout().chunks();
  for (const PipeOp& op : schedule_) {
    if (op.kind == PipeOp::forward) {
      pipeline_forward(op, state);
    } else {
      pipeline_backward(op, loss_scale, state);
    }
  }
  // Waiting for a neighbour to take this stage's last sends is waiting for the neighbour: bubble, as a receive's is.
  for (PipeSend& send : sends_) {
    if (!send.work) continue;
    set_phase(send.phase);
    as_bubble(times, [&] { wait_collective(*send.work); });
    send.work.reset();
  }
}

// Sends a copy of data[0, stage_floats) to `peer` on `stream`, in a buffer whose last send has finished (or a new one).
void Training::send_copy(const float* data, int peer, int stream, const char* phase) {
  const std::size_t count = model_.stage_floats(B_, T_);
  PipeSend* free = nullptr;
  for (PipeSend& send : sends_) {
    if (!send.work || send.work->done()) {
      if (send.work) wait_collective(*send.work);  // finished: hears of a failure, waits for nothing
      free = &send;
      break;
    }
  }
  if (free == nullptr) free = &sends_.emplace_back();
  free->data.assign(data, data + count);
  free->work = groups_.pp->send(free->data.data(), count, peer, stream);
  free->phase = phase;
}

void Training::receive(PipeState& state, float* data, int peer, int stream, const char* phase) {
  set_phase(phase);
  as_bubble(state.times,
            [&] { wait_collective(*groups_.pp->recv(data, model_.stage_floats(B_, T_), peer, stream)); });
}

// A chunk's forward of one micro-batch: its tokens are read once, at its first chunk's (the chunks of a micro-batch run
// in order on every rank: each one's input comes through the one before). Every chunk of a rank writes the
// micro-batch's loss slot (0 but the last stage's last chunk, which runs after the others).
void Training::pipeline_forward(const PipeOp& op, PipeState& state) {
  if (state.free_sets.empty())
    throw std::logic_error("pipeline: the schedule keeps more micro-batches in flight than the " +
                           std::to_string(model_.activation_sets()) + " activation sets allow");
  const int set = state.free_sets.back();
  state.free_sets.pop_back();
  state.set_of[{op.micro, op.chunk}] = set;
  model_.use_activation_set(set, op.chunk);
  const int P = grid_.pp(), chunk = op.chunk * P + place_.pp;
  if (op.chunk == 0) {
    state.batches.emplace(op.micro,
                          timed("data", state.times, &StepTimes::data_wait_ms, [&] { return prefetch_->next(); }));
  }
  Batch& batch = state.batches.at(op.micro);
  const bool last_chunk = op.chunk == model_.layout().chunks() - 1;
  if (chunk > 0)
    receive(state, model_.stage_input(B_, T_), (place_.pp + P - 1) % P, kActivations, recv_forward_phase_);
  timed("forward", state.times, &StepTimes::compute_ms, [&] {
    model_.forward_batch(batch.tokens.data(), B_, T_, window_->micro_losses() + op.micro);
    if (last_chunk) batch.tokens.free_after(k().record_fence());
  });
  if (last_chunk) state.batches.erase(op.micro);
  if (chunk < P * model_.layout().chunks() - 1)
    send_copy(model_.stage_output(), (place_.pp + 1) % P, kActivations, send_forward_phase_);
}

void Training::pipeline_backward(const PipeOp& op, float loss_scale, PipeState& state) {
  const int set = state.set_of.at({op.micro, op.chunk});
  model_.use_activation_set(set, op.chunk);
  const int P = grid_.pp(), chunk = op.chunk * P + place_.pp;
  if (chunk < P * model_.layout().chunks() - 1)
    receive(state, model_.stage_output_grad(), (place_.pp + 1) % P, kGradients, recv_backward_phase_);
  const bool final = op.micro == K_ - 1;
  timed("backward", state.times, &StepTimes::compute_ms, [&] {
    if (final && !state.reducing) {
      if (ddp_) ddp_->begin_backward(true);
      if (zero_) zero_->begin_backward(true);
      state.reducing = true;
    }
    syncing_ = final;
    model_.backward(loss_scale, pipeline_grads_ready_);
  });
  if (chunk > 0) send_copy(model_.stage_input_grad(), (place_.pp + P - 1) % P, kGradients, send_backward_phase_);
  state.set_of.erase({op.micro, op.chunk});
  state.free_sets.push_back(set);
  if (!final || --state.finals_left > 0) return;
  // The last stage's wait in the tied sum is for the first stage's last backward: the pipeline's drain, a bubble.
  as_bubble(state.times, [&] { sum_tied(); });
  timed("reduce (waiting for the gradient reductions)", state.times, &StepTimes::comm_exposed_ms, [&] {
    if (ddp_) ddp_->finish_backward();
    if (zero_) zero_->finish_backward();
  });
}

// The gradients' reduction with pipeline parallelism: the model's GradsReady, except that on the first and last stage,
// in the step's last backward, the range that starts at 0 (wte, which backward hands over last) waits for sum_tied().
// The tied gradient is summed before the data-parallel reduction sees it, so that DDP's buckets and ZeRO's shards (cut
// differently on the two stages) reduce it whole; and after the stage has sent its input's gradient on, since the
// first stage's last backward needs that gradient before it can join the sum.
void Training::start_pipeline(const Gpt::GradsReady& inner) {
  const int P = grid_.pp(), V = o_.pp_virtual, stage = place_.pp;
  const PipeSchedule schedule = V > 1 ? PipeSchedule::interleaved : parse_pipe_schedule(o_.pp_schedule);
  schedule_ = pipeline_schedule(schedule, P, stage, K_, V);
  model_.set_activation_sets(activation_sets(schedule, P, stage, K_, V));
  inner_grads_ready_ = inner;
  // Only the last micro-batch's backwards hand gradients over (pipeline_backward); the range at 0 waits for sum_tied().
  pipeline_grads_ready_ = [this](std::size_t offset, std::size_t count) {
    if (!syncing_) return;
    if (offset == 0 && groups_.emb) {
      tied_count_ = count;
    } else if (inner_grads_ready_) {
      inner_grads_ready_(offset, count);
    }
  };
  // The phases name the stage and its neighbours (health/phase.h; a hang's evidence shows where each rank waits).
  const std::string here = "stage " + std::to_string(stage) + " of " + std::to_string(P) + ", tensor-parallel rank " +
                           std::to_string(place_.tp);
  const std::string before = std::to_string((stage + P - 1) % P), after = std::to_string((stage + 1) % P);
  recv_forward_phase_ = lasting_phase("pp-recv (" + here + " waits for stage " + before + "'s activations)");
  recv_backward_phase_ = lasting_phase("pp-recv (" + here + " waits for stage " + after + "'s gradient)");
  send_forward_phase_ = lasting_phase("pp-send (" + here + " waits for stage " + after + " to take its activations)");
  send_backward_phase_ = lasting_phase("pp-send (" + here + " waits for stage " + before + " to take its gradient)");
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

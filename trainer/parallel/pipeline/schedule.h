#pragma once

// Pipeline-parallel schedules: which forwards and backwards each pipeline rank runs, in which order, for one
// optimizer step of m micro-batches over P stages; how many micro-batches' activations a rank keeps; and a simulator
// that runs every rank's schedule against the pipeline's dependencies to give the step time and the bubble, or to
// find that the schedule deadlocks (the check that a schedule is valid).
//
// - GPipe (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using Pipeline Parallelism"): all
//   m forwards, then all m backwards. A rank keeps all m micro-batches' activations.
// - 1F1B (PipeDream-Flush: Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN Training"; Megatron-LM's
//   default, forward_backward_pipelining_without_interleaving): min(P - stage - 1, m) warm-up forwards, then one
//   forward and one backward alternately, then the cool-down backwards. The same bubble as GPipe, (P - 1) / m of the
//   ideal compute time, but rank s keeps at most min(m, P - s) activation sets instead of m.
// - Interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
//   Megatron-LM", section 2.2.2; Megatron-LM's forward_backward_pipelining_with_interleaving): the layers are cut
//   into P x V chunks and rank s holds chunks s, s + P, s + 2P, ... (local chunk v is global chunk v*P + s). The
//   rank's m*V forward passes go in groups of P micro-batches: micro-batches 0..P-1 through local chunk 0, then the
//   same ones through chunk 1, ..., chunk V-1, then micro-batches P..2P-1 likewise; its backwards follow the same
//   order with the chunks reversed (V-1 first). Warm-up: (P - s - 1) * 2 + (V - 1) * P forwards (all m*V when that
//   is as many or more), then one forward and one backward alternately, then the cool-down backwards. The bubble
//   shrinks V-fold, to (P - 1) / (V * m), for V times the point-to-point transfers. Megatron-LM requires m to be a
//   multiple of P here, and so does this.
//
// Backwards run in increasing micro-batch order within each chunk on every schedule: the trainer accumulates
// gradients in that order and marks the last micro-batch's backward for the data-parallel reduction.

#include <string>
#include <vector>

namespace dtrain::trainer {

enum class PipeSchedule { gpipe, one_f_one_b, interleaved };

// "gpipe" | "1f1b" | "interleaved"; anything else throws std::invalid_argument naming the allowed values.
PipeSchedule parse_pipe_schedule(const std::string& name);
const char* pipe_schedule_name(PipeSchedule schedule);

struct PipeOp {
  enum Kind { forward, backward } kind = forward;
  int micro = 0;
  int chunk = 0;  // the model chunk on this rank, 0..V-1 (0 unless interleaved); global chunk chunk * P + stage
};

inline bool operator==(const PipeOp& a, const PipeOp& b) {
  return a.kind == b.kind && a.micro == b.micro && a.chunk == b.chunk;
}

// Throws std::invalid_argument with the numbers: stages, micro_batches and virtual_stages below 1; V > 1 without the
// interleaved schedule; interleaved with V < 2 or with micro_batches not a multiple of stages.
void check_pipeline_args(PipeSchedule schedule, int stages, int micro_batches, int virtual_stages);

// A model of `layers` layers interleaved over `stages` x `virtual_stages` chunks (dtrain-trainer's --pp-virtual): more
// than one stage, layers that divide into the chunks, and check_pipeline_args' rules for the interleaved schedule;
// std::invalid_argument with the numbers otherwise.
void check_interleaving(int layers, int stages, int virtual_stages, int micro_batches);

// The ops pipeline rank `stage` (0..P-1) runs for one optimizer step of m micro-batches, in order.
std::vector<PipeOp> pipeline_schedule(PipeSchedule schedule, int stages, int stage, int micro_batches,
                                      int virtual_stages = 1);

// The most (micro-batch, chunk) pairs whose forward has run and whose backward has not, at any point of the rank's
// schedule: how many activation sets the stage keeps (with V > 1, each is one chunk's, 1/V of the stage's layers).
int activation_sets(PipeSchedule schedule, int stages, int stage, int micro_batches, int virtual_stages = 1);

// (P - 1) / (V * m): the bubble over the ideal compute time with equal stage costs and free transfers.
double ideal_bubble_fraction(int stages, int micro_batches, int virtual_stages = 1);

// "F0 F1 B0 F2 B1 B2"; "F0.0 F1.0 F0.1 ..." (micro.chunk) when any op is on a chunk other than 0.
std::string describe_schedule(const std::vector<PipeOp>& ops);

struct PipeCosts {
  double forward_ms = 1;   // one micro-batch's forward through one chunk (the stage's layers when V = 1)
  double backward_ms = 2;  // its backward
  double p2p_ms = 0;       // one send between ranks (activations forward, their gradients backward)
};

struct PipeTimeline {
  double step_ms = 0;               // from the first op's start to the last op's end
  std::vector<double> busy_ms;      // per stage: its ops' compute time
  double bubble_fraction = 0;       // (step_ms * P - sum of busy_ms) / sum of busy_ms
};

// Runs every rank's schedule with a pipeline's dependencies. Forward (i, g) needs forward (i, g - 1) done, plus
// p2p_ms when chunk g - 1 is on another rank; backward (i, g) needs backward (i, g + 1) done (plus p2p_ms across
// ranks) and its own forward (i, g). Each rank runs its ops in its schedule's order, one at a time; a send never
// waits for its receiver. Throws std::logic_error naming each stuck rank, its op and what that op waits for when no
// rank can progress (a deadlock).
PipeTimeline simulate_pipeline(PipeSchedule schedule, int stages, int micro_batches, int virtual_stages,
                               const PipeCosts& costs);

// The same over op lists given per rank (rank r's ops in per_rank[r]; P = per_rank.size()), to check any schedule.
// Throws std::invalid_argument when a rank's list is not each (micro, chunk)'s forward and backward exactly once.
PipeTimeline simulate_pipeline_ops(const std::vector<std::vector<PipeOp>>& per_rank, int micro_batches,
                                   int virtual_stages, const PipeCosts& costs);

}  // namespace dtrain::trainer

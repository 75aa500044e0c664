#pragma once

// dtrain-trainer's own GPT-2 (trainer/model): its exact parameter count, and the memory one rank of dtrain-trainer
// reports in its --metrics lines (mem_params_bytes, mem_grads_bytes, mem_optim_bytes, mem_activations_bytes) at
// each --zero stage and --precision, with or without tensor and pipeline parallelism. The trainer's 16-bit
// accounting departs from the ZeRO paper's in two ways (README "Mixed precision"): gradients are fp32 (4P, not 2P)
// and at stages 1-2 the tensors its fp32 kernels read are kept widened, 4 bytes each on top of the 16-bit working
// copy. `dtrain plan --trainer-accounting` prints these beside the paper's numbers.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/plan/costs/formulas.h"
#include "trainer/model/config.h"
#include "trainer/model/layout.h"
#include "trainer/parallel/pipeline/schedule.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::plan {

// Parameters of the model without ZeRO's padding (what its checkpoint holds; the paper's P for it).
std::size_t trainer_params(const trainer::GptConfig& config);

// Values of the tensors the trainer's fp32 kernels read (embeddings, LayerNorm weights and biases, the linear
// layers' biases) that `layout` holds (a pipeline stage's own, a tensor-parallel rank's slices): the list of
// Gpt::fp32_tensors, which the parity test holds this to.
std::size_t fp32_kernel_values(const trainer::ParamLayout& layout);

// What a rank reports at `stage` 1..3 over `world` ranks, with --param-dtype left at its default (the precision):
// shards.h's zero_memory (fp32) or mixed_zero_memory (bf16, fp16) with the padded count of
// ParamLayout(config, world), exactly as the ZeRO engine calls them. nullopt at stage 0, where dtrain-trainer
// reports no mem_* metrics without --tp or --pp.
std::optional<trainer::ZeroMemory> trainer_model_states(const trainer::GptConfig& config, int stage,
                                                        Precision precision, int world);

// The activations one rank of dtrain-trainer keeps for a micro-batch of micro_batch x seq_len at `precision` with
// `recompute`, without tensor or pipeline parallelism (its --metrics mem_activations_bytes, Gpt::activation_bytes):
// trainer_stage_activations of the whole model, one set.
std::size_t trainer_activation_bytes(const trainer::GptConfig& config, int micro_batch, int seq_len,
                                     Precision precision, trainer::Recompute recompute);

// A dtrain-trainer run with tensor and/or pipeline parallelism on tp * pp * dp ranks: --tp, --sequence-parallel,
// --pp, --pp-schedule over --grad-accum micro-batches, --zero (0..3 with one stage, 0|1 with more), --recompute,
// --batch-size and --seq-len.
struct TrainerLayout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int zero = 0;
  bool sequence_parallel = false;  // --sequence-parallel: the residual stream's tokens split over the tp ranks
  int ranks_per_node = 0;          // the job's workers per node (LOCAL_WORLD_SIZE); 0: all of them on one
  trainer::Recompute recompute = trainer::Recompute::none;
  trainer::PipeSchedule schedule = trainer::PipeSchedule::one_f_one_b;  // interleaved with virtual_stages above 1
  int virtual_stages = 1;  // --pp-virtual: model chunks per stage
  int micro_batches = 1;  // --grad-accum: the pipeline's micro-batches
  int micro_batch = 1;    // --batch-size
  int seq_len = 0;        // --seq-len
};

// Why dtrain-trainer refuses `layout` of `config` (the trainer's own RankGrid, check_model_split and
// check_parallel_flags: a tensor-parallel group within a node, --tp dividing the heads and the padded vocabulary,
// --pp the layers, --zero 2/3 with --pp above 1, sequence parallelism over tp > 1 ranks that divide the micro-batch's
// batch x seq_len tokens, --pp-virtual chunks that divide the layers and micro-batches that divide by --pp), or ""
// when it runs it.
std::string trainer_layout_refusal(const trainer::GptConfig& config, const TrainerLayout& layout);

// What every rank of pipeline stage `stage` reports in its --metrics line (the ranks of a stage report the same:
// their tensor-parallel slices are of equal size, and so are their data-parallel replicas and ZeRO-1 shards).
struct TrainerStageMemory {
  int stage = 0;
  int layers = 0;           // the stage's transformer blocks
  int activation_sets = 1;  // micro-batches whose activations it keeps at once (schedule.h, activation_sets)
  trainer::ZeroMemory states;
  std::uint64_t activations = 0;
  std::uint64_t total() const { return states.params + states.grads + states.optim + activations; }
};

// Every stage of `layout` (which trainer_layout_refusal accepts), stage 0 first. Per rank, with B = ParamLayout's
// buffer_size() of the stage's tensors (its layers; the first stage wte and wpe, the last its copy of wte and the
// final LayerNorm; each split over tp) and n its parameters:
//   --zero 0 (trainer/train/loop.cpp, the --tp/--pp runs): params 4B (+ 2B for the 16-bit working copy), grads 4B,
//     optim 8n (AdamW's m and v)
//   --zero 1..3: the ZeRO engine's memory over the dp ranks of its data-parallel group, B padded for them:
//     zero_memory (fp32) or mixed_zero_memory (16 bits, the master sharded, the stage's fp32_kernel_values widened)
//   activations: activation_sets x trainer_stage_activations, plus the logits, B*T x Vp/tp floats, once on the last
//     stage (Gpt::activation_bytes); activation_sets is the schedule's (gpipe m, 1f1b min(m, pp - stage)), 1 with one
//     stage.
std::vector<TrainerStageMemory> trainer_stage_memory(const trainer::GptConfig& config, const TrainerLayout& layout,
                                                     Precision precision);

// Bytes of one activation set of a stage of `layers` blocks over tp ranks, for a micro-batch of micro_batch x
// seq_len: the buffers of trainer/model/activations.h at a tensor-parallel rank's widths (3C/tp of qkv, C/tp of
// attention's output, 4C/tp of the MLP, NH/tp heads, Vp/tp of probs; with sequence parallelism the residual stream,
// its gradient and the LayerNorm statistics on 1/tp of the tokens, and 2C for the LayerNorm gradients), counted from
// the shapes, and attention backward's scratch on the CPU for one thread (the CPU backend's attention_scratch_size:
// threads x 64 x T floats; each further thread adds 256 x T bytes). Not counted: the token ids (not in
// Gpt::activation_bytes).
std::size_t trainer_stage_activations(const trainer::GptConfig& config, int tp, int layers, int micro_batch,
                                      int seq_len, Precision precision, trainer::Recompute recompute,
                                      bool sequence_parallel = false);

}  // namespace dtrain::plan

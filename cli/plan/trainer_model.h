#pragma once

// dtrain-trainer's own GPT-2 (trainer/model): its exact parameter count, and the model-state bytes one rank of
// dtrain-trainer reports in its --metrics lines (mem_params_bytes, mem_grads_bytes, mem_optim_bytes) at each
// --zero stage and --precision. The trainer's 16-bit accounting departs from the ZeRO paper's in two ways (README
// "Mixed precision"): gradients are fp32 (4P, not 2P) and at stages 1-2 the tensors its fp32 kernels read are kept
// widened, 4 bytes each on top of the 16-bit working copy. `dtrain plan --trainer-accounting` prints these beside
// the paper's numbers.

#include <cstddef>
#include <optional>

#include "cli/plan/costs/formulas.h"
#include "trainer/model/config.h"
#include "trainer/model/layout.h"
#include "trainer/parallel/zero/shards.h"

namespace dtrain::plan {

// Parameters of the model without ZeRO's padding (what its checkpoint holds; the paper's P for it).
std::size_t trainer_params(const trainer::GptConfig& config);

// Values of the tensors the trainer's fp32 kernels read (embeddings, LayerNorm weights and biases, the linear
// layers' biases): the list of Gpt::fp32_tensors, which the parity test holds this to.
std::size_t fp32_kernel_values(const trainer::ParamLayout& layout);

// What a rank reports at `stage` 1..3 over `world` ranks, with --param-dtype left at its default (the precision):
// shards.h's zero_memory (fp32) or mixed_zero_memory (bf16, fp16) with the padded count of
// ParamLayout(config, world), exactly as the ZeRO engine calls them. nullopt at stage 0, where dtrain-trainer
// reports no mem_* metrics.
std::optional<trainer::ZeroMemory> trainer_model_states(const trainer::GptConfig& config, int stage,
                                                        Precision precision, int world);

// The activations one rank of dtrain-trainer keeps for a micro-batch of micro_batch x seq_len at `precision` with
// `recompute` (its --metrics mem_activations_bytes, Gpt::activation_bytes): the buffers of trainer/model/
// activations.h and the logits, counted from the shapes. Not counted: attention backward's scratch (CPU: threads x
// 64 x T floats, a few hundred KiB) and the token ids.
std::size_t trainer_activation_bytes(const trainer::GptConfig& config, int micro_batch, int seq_len,
                                     Precision precision, trainer::Recompute recompute);

}  // namespace dtrain::plan

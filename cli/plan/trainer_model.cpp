#include "cli/plan/trainer_model.h"

#include <algorithm>
#include <stdexcept>

#include "trainer/parallel/grid/rank_grid.h"

namespace dtrain::plan {
namespace {

// The CPU backend's attention_scratch_size per thread, in rows of T floats (trainer/kernels/cpu/backend.cpp,
// kAttentionBlock).
constexpr std::size_t kAttentionBlockRows = 64;

trainer::ParamLayout stage_layout(const trainer::GptConfig& config, const TrainerLayout& l, int stage) {
  return trainer::ParamLayout(config, l.zero > 0 ? l.dp : 1, trainer::TensorParallel{l.tp, 0},
                              trainer::PipelineStage{l.pp, stage, l.virtual_stages});
}

trainer::ZeroMemory stage_states(const trainer::ParamLayout& layout, const TrainerLayout& l, Precision precision) {
  const std::uint64_t floats = layout.buffer_size();
  if (l.zero == 0) {
    // Training::train_step's report for --tp/--pp runs without ZeRO: the fp32 parameters and the 16-bit working
    // copy, the gradients, AdamW's m and v over the unpadded parameters.
    const std::uint64_t half = precision == Precision::fp32 ? 0 : 2 * floats;
    return {4 * floats + half, 4 * floats, 8 * static_cast<std::uint64_t>(layout.num_params())};
  }
  if (precision == Precision::fp32) return trainer::zero_memory(l.zero, layout.buffer_size(), l.dp);
  return trainer::mixed_zero_memory(l.zero, layout.buffer_size(), l.dp, /*master_sharded=*/true,
                                    fp32_kernel_values(layout));
}

}  // namespace

std::size_t trainer_params(const trainer::GptConfig& config) { return trainer::ParamLayout(config).num_params(); }

std::size_t fp32_kernel_values(const trainer::ParamLayout& layout) {
  using trainer::LayerTensor;
  // Another stage's embeddings and final LayerNorm are empty ranges in this layout; its layers are not in it.
  std::size_t values = layout.wte().count + layout.wpe().count + layout.lnfw().count + layout.lnfb().count;
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    for (LayerTensor t : {LayerTensor::ln1w, LayerTensor::ln1b, LayerTensor::qkvb, LayerTensor::attprojb,
                          LayerTensor::ln2w, LayerTensor::ln2b, LayerTensor::fcb, LayerTensor::fcprojb})
      values += layout.layer_tensor(l, t).count;
  }
  return values;
}

std::optional<trainer::ZeroMemory> trainer_model_states(const trainer::GptConfig& config, int stage,
                                                        Precision precision, int world) {
  if (stage == 0) return std::nullopt;
  const trainer::ParamLayout layout(config, world);
  if (precision == Precision::fp32) return trainer::zero_memory(stage, layout.buffer_size(), world);
  return trainer::mixed_zero_memory(stage, layout.buffer_size(), world, /*master_sharded=*/true,
                                    fp32_kernel_values(layout));
}

std::size_t trainer_stage_activations(const trainer::GptConfig& config, int tp, int layers, int micro_batch,
                                      int seq_len, Precision precision, trainer::Recompute recompute,
                                      bool sequence_parallel) {
  const std::size_t BT = static_cast<std::size_t>(micro_batch) * seq_len, T = seq_len;
  const std::size_t t = static_cast<std::size_t>(tp);
  const std::size_t n = sequence_parallel ? BT / t : BT;  // this rank's tokens of the residual stream
  const std::size_t C = config.channels, NH = config.num_heads / t, Vp = config.padded_vocab_size / t;
  const std::size_t QKV = 3 * C / t, ATT = C / t, FC = 4 * C / t;
  const std::size_t L = static_cast<std::size_t>(layers);
  // Layers kept of a block's activations, and of attention's probabilities.
  const std::size_t kept = recompute == trainer::Recompute::full ? 1 : L;
  const std::size_t kept_att = recompute == trainer::Recompute::none ? L : 1;
  const bool half = precision != Precision::fp32;
  // A matrix product's input: fp32, or two 16-bit values to a float.
  auto input = [&](std::size_t values) { return half ? (values + 1) / 2 : values; };
  std::size_t floats = n * C;                                // encoded
  floats += 2 * input(kept * BT * C);                        // ln1, ln2
  floats += 4 * kept * n;                                    // their means and reciprocal deviations
  floats += kept * BT * QKV;                                 // qkv
  floats += input(kept * BT * ATT);                          // atty
  floats += kept_att * NH * BT * T;                          // att
  floats += kept * n * C;                                    // residual2
  floats += kept * BT * FC + input(kept * BT * FC);          // fch, fch_gelu
  floats += L * n * C;                                       // residual3: every block's output, kept
  floats += input(BT * C) + 2 * n;                           // lnf and its statistics
  floats += BT * Vp + BT;                                    // probs, losses
  floats += 2 * BT * C + n * C + BT * std::max({C, QKV, FC});  // proj, dbtc, dresidual, dbig
  if (sequence_parallel) floats += 2 * C;                    // dln: the LayerNorm gradients before their sum
  if (half) floats += (BT * std::max({Vp, FC, QKV, C}) + 1) / 2;  // dout_half
  floats += kAttentionBlockRows * T;                         // attention backward's scratch, one thread
  return floats * sizeof(float);
}

std::size_t trainer_activation_bytes(const trainer::GptConfig& config, int micro_batch, int seq_len,
                                     Precision precision, trainer::Recompute recompute) {
  const std::size_t logits = static_cast<std::size_t>(micro_batch) * seq_len * config.padded_vocab_size;
  return trainer_stage_activations(config, 1, config.num_layers, micro_batch, seq_len, precision, recompute) +
         logits * sizeof(float);
}

std::string trainer_layout_refusal(const trainer::GptConfig& config, const TrainerLayout& l) {
  const int world = l.tp * l.pp * l.dp;
  try {
    const trainer::GridShape grid{world, l.tp, l.pp, l.ranks_per_node > 0 ? l.ranks_per_node : world, false};
    static_cast<void>(trainer::RankGrid(grid));  // its constructor refuses a group across nodes
    trainer::check_model_split(config.num_heads, config.padded_vocab_size, config.num_layers, l.tp, l.pp, l.zero);
    if (l.virtual_stages > 1)
      trainer::check_interleaving(config.num_layers, l.pp, l.virtual_stages, l.micro_batches);
  } catch (const std::invalid_argument& e) {
    return std::string("dtrain-trainer refuses it: ") + e.what();
  }
  const long long tokens = static_cast<long long>(l.micro_batch) * l.seq_len;
  if (l.sequence_parallel && (l.tp < 2 || tokens % l.tp != 0))
    return "dtrain-trainer refuses it: --sequence-parallel splits a micro-batch's " + std::to_string(tokens) +
           " tokens over --tp " + std::to_string(l.tp) + ", which must be above 1 and divide them";
  return "";
}

std::vector<TrainerStageMemory> trainer_stage_memory(const trainer::GptConfig& config, const TrainerLayout& l,
                                                     Precision precision) {
  std::vector<TrainerStageMemory> out;
  // 1F1B keeps at most pp sets whatever m (schedule.h), interleaved 1F1B at most its warm-up + 1 (under (V + 1) pp), so
  // their schedules need not list millions of micro-batches (m stays a multiple of pp, as interleaving needs).
  const int V = l.virtual_stages;
  const int m = l.schedule == trainer::PipeSchedule::gpipe ? l.micro_batches
                : V > 1 ? std::min(l.micro_batches, l.pp * (V + 2))
                        : std::min(l.micro_batches, l.pp);
  for (int s = 0; s < l.pp; ++s) {
    const trainer::ParamLayout layout = stage_layout(config, l, s);
    TrainerStageMemory stage;
    stage.stage = s;
    stage.layers = layout.stage_layers();
    stage.activation_sets = l.pp > 1 ? trainer::activation_sets(l.schedule, l.pp, s, m, V) : 1;
    stage.states = stage_states(layout, l, precision);
    // A set holds one micro-batch's activations of one model chunk (all the stage's layers without interleaving).
    stage.activations = stage.activation_sets * trainer_stage_activations(config, l.tp, layout.chunk_layers(),
                                                                          l.micro_batch,
                                                                          l.seq_len, precision, l.recompute,
                                                                          l.sequence_parallel);
    if (s == l.pp - 1) {  // the logits, one buffer for every set (Gpt::activation_bytes)
      stage.activations += static_cast<std::uint64_t>(l.micro_batch) * l.seq_len *
                           (config.padded_vocab_size / l.tp) * sizeof(float);
    }
    out.push_back(stage);
  }
  return out;
}

}  // namespace dtrain::plan

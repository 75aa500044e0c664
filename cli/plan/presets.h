#pragma once

// The models `dtrain plan --model NAME` knows: published GPT-2 and Llama shapes, and dtrain-trainer's own tiny model.
// Each is counted as its architecture lays out its parameters:
//   GPT-2 (Radford et al. 2019; nanoGPT/llm.c): token and learned position embeddings, the output head tied to the
//     token embedding; per layer two LayerNorms (weight and bias), fused QKV and output projections with biases, a
//     4h GELU MLP with biases: 12h^2 + 13h; a final LayerNorm. Counted as dtrain-trainer lays it out (llm.c pads the
//     vocabulary to a multiple of 128: 50,257 -> 50,304 rows, +47h over the published count), since the trainer
//     runs these shapes (--trainer-accounting, and its flags in the recommendation).
//   Llama 2 and 3 (Touvron et al. 2023; Hugging Face LlamaForCausalLM): token embedding and an untied output head
//     (2Vh); per layer q and o projections h x h, k and v projections h x (kv_heads * head_dim) (grouped-query
//     attention), a SwiGLU MLP of three h x ffn matrices (gate, up, down), no biases, two RMSNorm weights (2h); a
//     final RMSNorm (h). The rotary inverse frequencies some checkpoints store are buffers, not parameters.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/plan/costs/formulas.h"
#include "trainer/model/config.h"

namespace dtrain::plan {

enum class Family { gpt2, llama };

struct ModelPreset {
  std::string name;      // what --model takes
  Family family = Family::gpt2;
  int layers = 0;        // L
  int hidden = 0;        // h
  int heads = 0;         // a, query heads; head_dim = h / a
  int kv_heads = 0;      // key/value heads (grouped-query attention; = heads for multi-head attention)
  int ffn = 0;           // the MLP's inner size (4h for GPT-2)
  int vocab = 0;         // V, real tokens
  int seq_len = 0;       // the longest sequence (learned positions for GPT-2, max_position_embeddings for Llama)
  bool trainer_name = false;  // dtrain-trainer knows it by this name (its --model); else by its shape flags
};

// Every preset, in the order --help lists them.
const std::vector<ModelPreset>& model_presets();
// "tiny, gpt2-124m, ..., llama3-70b"
std::string preset_names();
// nullptr when there is no preset of that name.
const ModelPreset* find_preset(std::string_view name);

// dtrain-trainer's GptConfig for a GPT-2 preset (vocabulary padded as llm.c pads it); nullopt for Llama, which
// dtrain-trainer does not run.
std::optional<trainer::GptConfig> preset_trainer_config(const ModelPreset& preset);

// Llama's parameters as laid out above (exact: the count PyTorch gives for LlamaForCausalLM's parameters).
double llama_params(const ModelPreset& preset);

// The preset's parameters: GPT-2 as dtrain-trainer lays it out (trainer_model.h), Llama by llama_params.
double preset_params(const ModelPreset& preset);

// The layer shape activations and model parallelism are estimated for.
Shape preset_shape(const ModelPreset& preset, int seq_len, int micro_batch);

}  // namespace dtrain::plan

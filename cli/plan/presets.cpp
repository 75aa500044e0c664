#include "cli/plan/presets.h"

#include "cli/plan/trainer_model.h"

namespace dtrain::plan {

// Sources of the shapes (fields: layers, hidden, heads, kv_heads, ffn, vocab, seq_len):
//   tiny: dtrain-trainer's test model (trainer/model/config.cpp).
//   GPT-2: Radford et al., "Language Models are Unsupervised Multitask Learners" (2019), Table 2 (layers and
//     d_model of the four sizes), vocabulary 50,257 and context 1,024 (Sec. 2.3); heads (d_model / 64) from the
//     Hugging Face config.json of openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl (n_layer, n_embd, n_head,
//     n_positions, vocab_size). Published totals 124,439,808 / 354,823,168 / 774,030,080 / 1,557,611,200.
//   Llama 2: config.json of meta-llama/Llama-2-{7b,13b,70b}-hf (num_hidden_layers, hidden_size,
//     num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings).
//     Totals 6,738,415,616 / 13,015,864,320 / 68,976,648,192.
//   Llama 3: config.json of meta-llama/Meta-Llama-3-{8B,70B} (the same keys). Totals 8,030,261,248 /
//     70,553,706,496.
const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny", Family::gpt2, 2, 64, 4, 4, 256, 256, 64, true},
      {"gpt2-124m", Family::gpt2, 12, 768, 12, 12, 3072, 50257, 1024, true},
      {"gpt2-355m", Family::gpt2, 24, 1024, 16, 16, 4096, 50257, 1024, false},
      {"gpt2-774m", Family::gpt2, 36, 1280, 20, 20, 5120, 50257, 1024, false},
      {"gpt2-1.5b", Family::gpt2, 48, 1600, 25, 25, 6400, 50257, 1024, false},
      {"llama2-7b", Family::llama, 32, 4096, 32, 32, 11008, 32000, 4096, false},
      {"llama2-13b", Family::llama, 40, 5120, 40, 40, 13824, 32000, 4096, false},
      {"llama2-70b", Family::llama, 80, 8192, 64, 8, 28672, 32000, 4096, false},
      {"llama3-8b", Family::llama, 32, 4096, 32, 8, 14336, 128256, 8192, false},
      {"llama3-70b", Family::llama, 80, 8192, 64, 8, 28672, 128256, 8192, false},
  };
  return presets;
}

std::string preset_names() {
  std::string names;
  for (const ModelPreset& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

const ModelPreset* find_preset(std::string_view name) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::optional<trainer::GptConfig> preset_trainer_config(const ModelPreset& p) {
  if (p.family != Family::gpt2) return std::nullopt;
  return trainer::GptConfig{p.seq_len, p.vocab, trainer::GptConfig::pad_vocab(p.vocab), p.layers, p.heads, p.hidden};
}

double llama_params(const ModelPreset& p) {
  const double h = p.hidden, kv = static_cast<double>(p.kv_heads) * (p.hidden / p.heads);
  const double attention = 2 * h * h + 2 * h * kv;  // q, o; k, v
  const double mlp = 3 * h * p.ffn;                 // gate, up, down
  const double norms = 2 * h;
  return 2.0 * p.vocab * h + p.layers * (attention + mlp + norms) + h;
}

double preset_params(const ModelPreset& p) {
  if (auto config = preset_trainer_config(p)) return static_cast<double>(trainer_params(*config));
  return llama_params(p);
}

Shape preset_shape(const ModelPreset& p, int seq_len, int micro_batch) {
  Shape shape{p.layers, p.hidden, p.heads, seq_len, micro_batch, p.kv_heads, p.vocab};
  shape.untied_embeddings = p.family == Family::llama;
  shape.gated_mlp = p.family == Family::llama;
  shape.ffn = p.ffn;
  return shape;
}

}  // namespace dtrain::plan

#pragma once

// The shape of a GPT-2 model, as llm.c's checkpoint header and nanoGPT's GPTConfig describe it.

#include <string>
#include <string_view>

namespace dtrain::trainer {

struct GptConfig {
  int max_seq_len = 0;        // maxT: rows of the position embedding wpe; the longest sequence the model accepts
  int vocab_size = 0;         // V: real tokens; the softmax and the loss run over the first V logits only
  int padded_vocab_size = 0;  // Vp >= V: rows of wte and logits per position (llm.c pads to a multiple of 128)
  int num_layers = 0;         // L: transformer blocks
  int num_heads = 0;          // NH: attention heads; channels must be a multiple of it
  int channels = 0;           // C: embedding width; head size = C / NH

  // Known presets:
  //   "tiny"      L=2  C=64  NH=4  maxT=64   V=256   Vp=256   (bytes as tokens; unit and parity tests)
  //   "gpt2-124m" L=12 C=768 NH=12 maxT=1024 V=50257 Vp=50304 (GPT-2 small, as llm.c)
  // Throws std::invalid_argument naming the preset and listing the known ones.
  static GptConfig preset(std::string_view name);

  // Vocabulary size rounded up to a multiple of 128, as llm.c pads it (256 -> 256, 50257 -> 50304).
  static int pad_vocab(int vocab_size);

  // Throws std::invalid_argument saying which field is wrong and what it must be (all positive, Vp >= V,
  // channels % num_heads == 0).
  void validate() const;

  int head_size() const { return channels / num_heads; }
  // "L=2 C=64 NH=4 maxT=64 V=256 Vp=256"
  std::string describe() const;
};

// Activation recomputation (--recompute; Korthikanti et al. 2022): none keeps every layer's activations for
// backward; selective keeps all but attention's probabilities (B, NH, T, T per layer), which backward recomputes
// from the kept q, k, v one layer at a time; full keeps only each block's input (the residual stream) and runs the
// block's forward again just before its backward. The recomputed values are the forward's bits, so the losses and
// gradients are those of none; the cost is one more attention forward (selective) or block forward (full) per layer.
enum class Recompute { none, selective, full };
const char* recompute_name(Recompute recompute);

}  // namespace dtrain::trainer

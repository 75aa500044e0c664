#include "trainer/model/config.h"

#include <stdexcept>

namespace dtrain::trainer {

GptConfig GptConfig::preset(std::string_view name) {
  if (name == "tiny") return GptConfig{64, 256, 256, 2, 4, 64};
  if (name == "gpt2-124m") return GptConfig{1024, 50257, 50304, 12, 12, 768};
  throw std::invalid_argument("unknown model preset '" + std::string(name) +
                              "'; known presets: tiny, gpt2-124m (or give --layers --channels --heads "
                              "--max-seq-len --vocab)");
}

int GptConfig::pad_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

void GptConfig::validate() const {
  auto positive = [](int value, const char* what) {
    if (value <= 0)
      throw std::invalid_argument(std::string("model config: ") + what + " must be positive, got " +
                                  std::to_string(value));
  };
  positive(max_seq_len, "max_seq_len (maxT)");
  positive(vocab_size, "vocab_size (V)");
  positive(padded_vocab_size, "padded_vocab_size (Vp)");
  positive(num_layers, "num_layers (L)");
  positive(num_heads, "num_heads (NH)");
  positive(channels, "channels (C)");
  if (padded_vocab_size < vocab_size)
    throw std::invalid_argument("model config: padded_vocab_size " + std::to_string(padded_vocab_size) +
                                " is smaller than vocab_size " + std::to_string(vocab_size) +
                                "; it must be >= V (llm.c pads V to a multiple of 128)");
  if (channels % num_heads != 0)
    throw std::invalid_argument("model config: channels " + std::to_string(channels) +
                                " is not a multiple of num_heads " + std::to_string(num_heads) +
                                "; pick heads that divide the channels (head size = C / NH)");
}

std::string GptConfig::describe() const {
  return "L=" + std::to_string(num_layers) + " C=" + std::to_string(channels) + " NH=" + std::to_string(num_heads) +
         " maxT=" + std::to_string(max_seq_len) + " V=" + std::to_string(vocab_size) +
         " Vp=" + std::to_string(padded_vocab_size);
}

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "none";
}

}  // namespace dtrain::trainer

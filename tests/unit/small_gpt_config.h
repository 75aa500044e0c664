#pragma once
// Test support: a GPT shape small enough for file round trips in milliseconds (2 layers, 8 channels, a padded
// vocabulary so that padding is exercised).

#include "trainer/model/config.h"

inline dtrain::trainer::GptConfig small_gpt_config() {
  dtrain::trainer::GptConfig c;
  c.max_seq_len = 16;
  c.vocab_size = 200;
  c.padded_vocab_size = 256;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 8;
  return c;
}

#pragma once

// Learning rate per optimizer step (0-based step s, W warmup steps, N total steps, peak lr, floor lr * min_lr_ratio):
//   s < W:             lr * (s + 1) / W                                   (linear warmup, as llm.c)
//   constant, s >= W:  lr
//   cosine, s >= W:    min + 0.5 * (1 + cos(pi * r)) * (lr - min),  r = min(1, (s - W) / max(1, N - W)),
//                      min = lr * min_lr_ratio
// trainer/python/gpt_reference.py implements the same formula.

#include <string_view>

namespace dtrain::trainer {

struct LrSchedule {
  enum class Kind { constant, cosine };
  Kind kind = Kind::constant;
  float lr = 6e-4f;           // peak learning rate
  long warmup_steps = 0;      // W; 0 = no warmup
  long total_steps = 1;       // N, the cosine's length (the run's --steps)
  float min_lr_ratio = 0.0f;  // cosine floor as a fraction of lr

  float at(long step) const;

  // "constant" | "cosine"; throws std::invalid_argument naming the accepted values.
  static Kind parse_kind(std::string_view name);
};

}  // namespace dtrain::trainer

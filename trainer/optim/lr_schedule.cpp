#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {

float LrSchedule::at(long step) const {
  if (step < warmup_steps) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (kind == Kind::constant) return lr;
  const double ratio = std::min(1.0, static_cast<double>(step - warmup_steps) /
                                         static_cast<double>(std::max(1L, total_steps - warmup_steps)));
  const double min_lr = static_cast<double>(lr) * min_lr_ratio;
  constexpr double kPi = 3.141592653589793;
  return static_cast<float>(min_lr + 0.5 * (1.0 + std::cos(kPi * ratio)) * (lr - min_lr));
}

LrSchedule::Kind LrSchedule::parse_kind(std::string_view name) {
  if (name == "constant") return Kind::constant;
  if (name == "cosine") return Kind::cosine;
  throw std::invalid_argument("unknown --lr-schedule '" + std::string(name) + "'; use constant or cosine");
}

}  // namespace dtrain::trainer

#include "trainer/train/dry_run.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "trainer/common/env.h"
#include "trainer/train/setup.h"

namespace dtrain::trainer {
namespace {

int env_count(const char* name, int fallback) {
  const Result<int> value = env_int(name, fallback, "the launcher sets it");
  if (!value.ok()) throw std::invalid_argument(value.status.message());
  if (value.value < 1) throw std::invalid_argument(std::string(name) + "=" + std::to_string(value.value) +
                                                   " must be at least 1");
  return value.value;
}

}  // namespace

RankGrid parallel_layout(const TrainOptions& o, const GptConfig& config) {
  const int world = env_count("WORLD_SIZE", 1);
  RankGrid grid({world, o.tp, o.pp, env_count("LOCAL_WORLD_SIZE", world), o.allow_cross_node_tp});
  check_model_split(config.num_heads, config.padded_vocab_size, config.num_layers, o.tp, o.pp, o.zero);
  return grid;
}

void check_parallel_flags(const TrainOptions& o, const GptConfig& config) {
  const RankGrid grid = parallel_layout(o, config);
  if (grid.tp() > 1 || grid.pp() > 1) {
    throw std::invalid_argument("--tp " + std::to_string(grid.tp()) + " --pp " + std::to_string(grid.pp()) +
                                ": dtrain-trainer has the layout of tensor and pipeline parallelism (--dry-run "
                                "prints it) but does not train with them yet; train with --tp 1 --pp 1 (data "
                                "parallelism, --zero 0..3)");
  }
}

int dry_run(const TrainOptions& o) {
  const GptConfig config = model_config(o);
  const RankGrid grid = parallel_layout(o, config);
  std::printf("model %s, --zero %d\n%s", config.describe().c_str(), o.zero, describe_grid(grid).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace dtrain::trainer

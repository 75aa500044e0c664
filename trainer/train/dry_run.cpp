#include "trainer/train/dry_run.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "trainer/common/env.h"
#include "trainer/parallel/pipeline/schedule.h"
#include "trainer/train/setup.h"

namespace dtrain::trainer {

RankGrid parallel_layout(const TrainOptions& o, const GptConfig& config) {
  const int world = env_setting("WORLD_SIZE", 1, 1, "the launcher sets it to the number of ranks");
  const int per_node = env_setting("LOCAL_WORLD_SIZE", world, 1, "the launcher sets it to the ranks on each node");
  RankGrid grid({world, o.tp, o.pp, per_node, o.allow_cross_node_tp});
  check_model_split(config.num_heads, config.padded_vocab_size, config.num_layers, o.tp, o.pp, o.zero);
  return grid;
}

void check_parallel_flags(const TrainOptions& o, const GptConfig& config) {
  const RankGrid grid = parallel_layout(o, config);
  if (o.sequence_parallel) {
    const int T = o.seq_len > 0 ? o.seq_len : config.max_seq_len;
    if (grid.tp() == 1)
      throw std::invalid_argument("--sequence-parallel splits tokens over a tensor-parallel group; it needs --tp above "
                                  "1");
    if (static_cast<long>(o.batch_size) * T % grid.tp() != 0)
      throw std::invalid_argument("--sequence-parallel: the " + std::to_string(o.batch_size) + " x " +
                                  std::to_string(T) + " tokens of a micro-batch do not divide by --tp " +
                                  std::to_string(grid.tp()) + "; choose --batch-size and --seq-len whose product does");
  }
  if (o.pp_virtual > 1) {
    if (o.pp_schedule == "gpipe")
      throw std::invalid_argument("--pp-virtual " + std::to_string(o.pp_virtual) +
                                  ": chunks run the interleaved 1F1B schedule; drop --pp-schedule gpipe");
    check_interleaving(config.num_layers, grid.pp(), o.pp_virtual, o.grad_accum);
  }
  if (grid.tp() == 1 && grid.pp() == 1) return;
  const std::string what = grid.tp() > 1 ? "--tp " + std::to_string(grid.tp()) + ": tensor parallelism"
                                         : "--pp " + std::to_string(grid.pp()) + ": pipeline parallelism";
  if (o.device == "cuda")
    throw std::invalid_argument(what + " runs on the CPU backend only so far; use --device cpu");
}

int dry_run(const TrainOptions& o) {
  const GptConfig config = model_config(o);
  check_parallel_flags(o, config);  // what training would refuse, --dry-run refuses too
  const RankGrid grid = parallel_layout(o, config);
  std::printf("model %s, --zero %d\n%s", config.describe().c_str(), o.zero, describe_grid(grid).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace dtrain::trainer

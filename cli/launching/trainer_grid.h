#pragma once

// `dtrain launch --dry-run` for a job of dtrain-trainer with --tp / --pp: the tensor, data and pipeline layout its
// ranks will take (trainer/parallel/grid/rank_grid.h), from the planned world and ranks per node, so a layout the
// trainer would refuse is seen before anything starts.

#include <optional>
#include <string>
#include <vector>

namespace dtrain::cli {

struct TrainerParallelFlags {
  int tp = 1;
  int pp = 1;
  bool allow_cross_node_tp = false;
};

// The --tp, --pp and --allow-cross-node-tp of a worker's argv when it runs dtrain-trainer (argv[0]'s file name, or
// the first argument after an `env`-style prefix of NAME=VALUE words); nullopt for any other program, or when
// neither --tp nor --pp is given. Both `--tp 2` and `--tp=2`; a value that is not a positive integer is left to
// the trainer to refuse (taken as 1 here).
std::optional<TrainerParallelFlags> trainer_parallel_flags(const std::vector<std::string>& argv);

// The grid's text (describe_grid's) for `world` ranks, `ranks_per_node` to a node; a layout the trainer refuses
// gives its reason in *refusal and "" back.
std::string trainer_grid_text(const TrainerParallelFlags& flags, int world, int ranks_per_node,
                              std::string* refusal);

}  // namespace dtrain::cli

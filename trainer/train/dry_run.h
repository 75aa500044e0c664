#pragma once

// The parallel layout of a run (--tp, --pp) before anything starts: checked against the world and the model, and
// printed by --dry-run.

#include "trainer/model/config.h"
#include "trainer/parallel/grid/rank_grid.h"
#include "trainer/train/options.h"

namespace dtrain::trainer {

// The grid for `o` on WORLD_SIZE ranks with LOCAL_WORLD_SIZE per node (from the environment, as a launcher sets
// them; 1 and the world without), with the model's split checked (rank_grid.h). Throws std::invalid_argument with
// the numbers when the layout is refused.
RankGrid parallel_layout(const TrainOptions& o, const GptConfig& config);

// Before training: the layout checked (rank_grid.h: --zero 2|3 with --pp above 1 refused), and --tp or --pp above 1
// refused with what they do not run with yet (--device cuda); std::invalid_argument with the reason.
void check_parallel_flags(const TrainOptions& o, const GptConfig& config);

// --dry-run: prints the model shape and the grid (describe_grid) on stdout; returns the exit code (0; a refused
// layout throws std::invalid_argument, which the caller turns into exit 2).
int dry_run(const TrainOptions& o);

}  // namespace dtrain::trainer

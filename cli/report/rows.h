#pragma once

// The rows of the per-rank charts (heat map, step bars, memory): one per rank, or one per node when a job has more
// than kMaxRankRows ranks, where rows of a few pixels would no longer be read one by one. A node row stands for all
// its ranks; what it shows of them (the slowest, the mean, the peak) is each chart's choice, said on the page.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "cli/report/model/run_model.h"

namespace dtrain::report {

inline constexpr std::size_t kMaxRankRows = 64;

struct ChartRow {
  std::string label;             // "rank 3" or "node 2 (gpu-07)"
  // What a row's tooltip calls it: its label, with a rank's place in a grid that splits the model ("rank 3 (pipeline
  // stage 1 of 2)", too long for the label column).
  std::string title;
  int rank = -1;                 // the rank of a rank row; -1 for a node row
  int node = -1;                 // the node of a node row; -1 for a rank row
  std::vector<unsigned> ranks;   // the ranks it stands for
  bool straggler = false;        // a straggler diagnosis names it (or, for a node row, one of its ranks)
  int pp_stage = -1;             // the pipeline stage of a rank row of a pipeline; -1 otherwise
};

struct ChartRows {
  bool by_node = false;
  std::vector<ChartRow> rows;
  std::map<unsigned, std::size_t> row_of;   // rank -> index into rows

  // The data attributes every row element carries, so a reader (or a test) finds a rank's row in the DOM (and a
  // pipeline stage's by data-pp-stage).
  std::string attributes(std::size_t row) const;
  // What a row stands for, said once above the charts.
  std::string note() const;
};

ChartRows chart_rows(const RunModel& model, std::size_t max_rank_rows = kMaxRankRows);

}  // namespace dtrain::report

#pragma once

// The heat map: one row per rank (or node, rows.h), one column per stretch of the job's time, each cell coloured by the
// rank's own part of its step there (step time less exposed communication and a pipeline stage's bubble) against the
// median cell. In data-parallel training every rank's step lasts as long as the slowest one's, so the step time alone
// cannot tell the ranks apart; what a rank spent outside waiting for its peers can. A node row shows its slowest rank.
// Rows of stragglers are outlined (class "straggler", data-straggler="1").

#include <string>

#include "cli/report/rows.h"
#include "cli/report/model/run_model.h"

namespace dtrain::report {

// At most this many time columns: finer than a pixel or two per column is not seen, and 1,024 ranks x 120 columns
// stay near 1 MB.
inline constexpr std::size_t kHeatColumns = 120;

// The SVG element; "" when no rank reported a step time.
std::string heat_map(const RunModel& model, const ChartRows& rows);

}  // namespace dtrain::report

#pragma once

// Per rank (or node, rows.h) over the whole job: where its step went, and its memory.
//   step breakdown   the means of its windows: data wait, compute, exposed communication, optimizer, the pipeline
//                    bubble (a pipeline stage's waits for its neighbours; a part only when some rank had one), and
//                    other = step - the rest (synchronisation, logging, what no phase accounts for); a node row shows
//                    the mean of its ranks
//   memory           the peak resident memory of its processes, and of its device when it reported one; a node row
//                    shows its ranks' peak

#include <string>

#include "cli/report/rows.h"
#include "cli/report/model/run_model.h"

namespace dtrain::report {

// "" when no rank reported a step time.
std::string step_breakdown(const RunModel& model, const ChartRows& rows);
// Host memory, then device memory when any rank reported it; "" when none reported memory.
std::string memory_charts(const RunModel& model, const ChartRows& rows);

}  // namespace dtrain::report

#pragma once

// The job over time: its rounds as bars coloured by how they ended (a restart is the next bar), and lanes of marks
// for worker failures, node losses, failed health checks (hangs) and diagnoses, then the same marks as a list with
// the hang evidence (the stacks files beside the logs).

#include <string>

#include "cli/report/model/run_model.h"

namespace dtrain::report {

// Marks listed at most: a job that lost hundreds of workers is read from its first failures and its log.
inline constexpr std::size_t kMaxListedMarks = 200;

std::string timeline(const RunModel& model);

}  // namespace dtrain::report

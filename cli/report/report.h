#pragma once

// The job report page (page.h) of a run directory, written as <run dir>/report.html: by the launcher when a job
// ends, and by `dtrain report [RUN_DIR]`; and of a tune directory (`dtrain tune`, tuning.h).

#include <string>

#include "common/status.h"

namespace dtrain::report {

inline constexpr const char* kReportFileName = "report.html";

// Reads `run_dir` and writes its report.html (a temp file renamed over it: a reader never sees half a page).
// Returns the page's path. A tune directory (tuning.h, is_tune_dir) gets its baseline run's page with a Tuning
// section, written in the tune directory.
Result<std::string> write_report(const std::string& run_dir);

}  // namespace dtrain::report

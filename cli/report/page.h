#pragma once

// The report page: one self-contained HTML document (inline CSS, inline SVG, no script, and a content security
// policy that forbids loading anything, so the page opens from a file:// URL on a machine without network and a
// browser never fetches on its behalf). Sections: the header (job, spec summary, outcome and root cause, restarts,
// wall time), loss and tokens/s, the heat map, where the step went, the timeline, the diagnoses, memory.

#include <string>

#include "cli/report/model/run_model.h"

namespace dtrain::report {

std::string render_page(const RunModel& model);

}  // namespace dtrain::report

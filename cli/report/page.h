#pragma once

// The report page: one self-contained HTML document (inline CSS, inline SVG, no script, and a content security
// policy that forbids loading anything, so the page opens from a file:// URL on a machine without network and a
// browser never fetches on its behalf). Sections: the header (job, spec summary, outcome and root cause, restarts,
// wall time), loss and tokens/s, the heat map, where the step went, the timeline, the diagnoses, memory.

#include <string>

#include "cli/report/model/run_model.h"

namespace dtrain::report {

// `after_header`: HTML put between the header and the first section (a tune directory's Tuning section, tuning.h).
std::string render_page(const RunModel& model, const std::string& after_header = "");
// A page of the same look holding `body` only (a tune directory whose baseline run is missing); `title` is text.
std::string render_bare_page(const std::string& title, const std::string& body);

}  // namespace dtrain::report

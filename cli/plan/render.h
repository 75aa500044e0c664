#pragma once

// `dtrain plan`'s output: a table for people, JSON for programs, with the same numbers (JSON in bytes, seconds and
// fractions; the table in GB = 1e9 bytes).

#include <string>

#include "cli/plan/recommend.h"

namespace dtrain::plan {

std::string render_text(const PlanReport& report);
std::string render_json(const PlanReport& report);

}  // namespace dtrain::plan

#pragma once
// Test support: the one diagnostic a spec (with --set overrides) is refused with, formatted; "" when it loads.

#include <string>
#include <vector>

#include "cli/spec/spec.h"

inline std::string only_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    dtrain::spec::load_spec_string(yaml, "job.yaml", sets);
  } catch (const dtrain::spec::SpecError& e) {
    return e.diagnostics.size() == 1 ? e.diagnostics[0].format() : e.what();
  }
  return "";
}

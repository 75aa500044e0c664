#pragma once

// YAML document -> Spec, checking the shape of every value as it goes (unknown and repeated keys, wrong types,
// values outside a fixed set) and recording where each key was written. Range and cross-key rules come after,
// in check_spec, so that a Spec built from flags gets them too.

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cli/spec/locations.h"
#include "cli/spec/spec.h"

namespace dtrain::spec::detail {

Position position_of(const YAML::Mark& mark);

// Reads `root` (a mapping, or null for an empty document). Problems are appended to `out`; the returned Spec keeps
// the defaults for anything that could not be read.
Spec read_spec(const YAML::Node& root, Locations& where, std::vector<Diagnostic>& out);

// Applies `--set key.path=value` arguments to `root` before it is read. A bad argument or path is reported with
// file "--set"; the paths that were set are recorded in `where` so later messages about them say "--set" too.
void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, Locations& where,
                     std::vector<Diagnostic>& out);

}  // namespace dtrain::spec::detail

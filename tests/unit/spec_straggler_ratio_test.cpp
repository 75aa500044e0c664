#include <doctest/doctest.h>

#include "cli/spec/spec.h"
#include "tests/unit/spec_only_error.h"

using namespace dtrain::spec;

TEST_CASE("health.straggler_ratio: 1.2 by default, set in YAML or with --set, above 1 and at most 100") {
  const std::string base = "name: x\ncommand: [a]\n";
  CHECK(load_spec_string(base, "job.yaml", {}).health.straggler_ratio == 1.2);
  CHECK(load_spec_string(base + "health: {straggler_ratio: 1.5}\n", "job.yaml", {}).health.straggler_ratio == 1.5);
  CHECK(load_spec_string(base, "job.yaml", {"health.straggler_ratio=2"}).health.straggler_ratio == 2);
  CHECK(only_error(base + "health: {straggler_ratio: 1}\n") ==
        "job.yaml:3:27: health.straggler_ratio: must be a number above 1 and at most 100, got 1. 1.2 names a rank "
        "whose own work per step is more than 20% above the median's.");
  CHECK(only_error(base, {"health.straggler_ratio=0.5"}).find("got 0.5") != std::string::npos);
  CHECK(only_error(base, {"health.straggler_ratio=101"}).find("at most 100") != std::string::npos);
  CHECK(only_error(base, {"health.straggler_ratio=fast"}).find("health.straggler_ratio") != std::string::npos);
}

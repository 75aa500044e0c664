#include <doctest/doctest.h>

#include "cli/spec/spec.h"
#include "tests/unit/spec_only_error.h"

using namespace dtrain::spec;

TEST_CASE("health.exit_timeout_s: 120 by default, set in YAML or with --set, 0 (off) to 7 days, a number only") {
  const std::string base = "name: x\ncommand: [a]\n";
  CHECK(load_spec_string(base, "job.yaml", {}).health.exit_timeout_s == 120);
  CHECK(load_spec_string(base + "health: {exit_timeout_s: 2.5}\n", "job.yaml", {}).health.exit_timeout_s == 2.5);
  CHECK(load_spec_string(base + "health: {exit_timeout_s: 0}\n", "job.yaml", {}).health.exit_timeout_s == 0);
  CHECK(load_spec_string(base + "health: {exit_timeout_s: 604800}\n", "job.yaml", {}).health.exit_timeout_s ==
        604800);
  CHECK(load_spec_string(base, "job.yaml", {"health.exit_timeout_s=7"}).health.exit_timeout_s == 7);
  // --set wins over the file.
  CHECK(load_spec_string(base + "health: {exit_timeout_s: 30}\n", "job.yaml", {"health.exit_timeout_s=0"})
            .health.exit_timeout_s == 0);
  // Bounds, as for every *_timeout_s key.
  CHECK(only_error(base + "health: {exit_timeout_s: 604801}\n") ==
        "job.yaml:3:26: health.exit_timeout_s: must be at most 604800 seconds (7 days), got 604801. Use 0 to turn it "
        "off.");
  CHECK(only_error(base + "health: {exit_timeout_s: -1}\n").find("health.exit_timeout_s: ") != std::string::npos);
  CHECK(only_error(base + "health: {exit_timeout_s: -1}\n").find("got -1") != std::string::npos);
  CHECK(only_error(base, {"health.exit_timeout_s=1e9"}).find("health.exit_timeout_s: must be at most 604800") !=
        std::string::npos);
  // Types.
  CHECK(only_error(base + "health: {exit_timeout_s: soon}\n") ==
        "job.yaml:3:26: health.exit_timeout_s: expected a number of seconds, got 'soon'.");
  CHECK(only_error(base + "health: {exit_timeout_s: .nan}\n") ==
        "job.yaml:3:26: health.exit_timeout_s: expected a number of seconds, got '.nan' (not a number).");
  CHECK(only_error(base + "health: {exit_timeout_s: [1]}\n").find("health.exit_timeout_s: expected a number") !=
        std::string::npos);
  CHECK(only_error(base, {"health.exit_timeout_s=never"}) ==
        "--set: health.exit_timeout_s: expected a number of seconds, got 'never'.");
  // A misspelling is pointed at the key.
  CHECK(only_error(base + "health: {exit_timeout: 5}\n").find("Did you mean 'health.exit_timeout_s'?") !=
        std::string::npos);
}

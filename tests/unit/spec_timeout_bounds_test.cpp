// health.node_timeout_s and nodes.join_timeout_s have lower bounds (cli/spec/spec.h: kMinNodeTimeoutS,
// kMinJoinTimeoutS): below them every job fails (every node lost to silence, or no agent in time), so a spec that
// asks for less is refused naming the key, its line and column, the bound and why; `dtrain run --rdzv-conf` keeps
// the same bounds (cli/run/multi_node_checks.h).

#include <doctest/doctest.h>

#include "cli/spec/spec.h"

namespace timeout_bounds_test {

using dtrain::spec::load_spec_string;
using dtrain::spec::SpecError;

// The text of the one error a spec has, or "" when it loads.
std::string error_of(const std::string& yaml) {
  try {
    load_spec_string(yaml, "job.yaml", {});
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace timeout_bounds_test

using timeout_bounds_test::SpecError;
using timeout_bounds_test::load_spec_string;


TEST_CASE("health.node_timeout_s: at least 2 s, and never 0") {
  for (const char* bad : {"0.001", "0", "1.99"}) {
    const std::string e = timeout_bounds_test::error_of(std::string("name: x\ncommand: [a]\nhealth: {node_timeout_s: ") + bad + "}\n");
    CAPTURE(bad);
    CHECK(timeout_bounds_test::has(e, "job.yaml:3:26: health.node_timeout_s: must be at least 2 seconds, got "));
    CHECK(timeout_bounds_test::has(e, "heartbeat"));
  }
  CHECK(timeout_bounds_test::error_of("name: x\ncommand: [a]\nhealth: {node_timeout_s: 2}\n").empty());
  CHECK(timeout_bounds_test::has(timeout_bounds_test::error_of("name: x\ncommand: [a]\nhealth: {node_timeout_s: 1e20}\n"),
            "health.node_timeout_s: must be at most 604800 seconds (7 days), got 1e+20."));
}

TEST_CASE("nodes.join_timeout_s: at least 2 s") {
  for (const char* bad : {"1e-9", "0", "1.5"}) {
    const std::string e = timeout_bounds_test::error_of(std::string("name: x\ncommand: [a]\nnodes: {join_timeout_s: ") + bad + "}\n");
    CAPTURE(bad);
    CHECK(timeout_bounds_test::has(e, "job.yaml:3:25: nodes.join_timeout_s: must be at least 2 seconds, got "));
  }
  CHECK(timeout_bounds_test::error_of("name: x\ncommand: [a]\nnodes: {join_timeout_s: 2}\n").empty());
}

TEST_CASE("--set reaches the same bounds") {
  CHECK_THROWS_AS(load_spec_string("name: x\ncommand: [a]\n", "job.yaml", {"health.node_timeout_s=0.5"}), SpecError);
  CHECK_THROWS_AS(load_spec_string("name: x\ncommand: [a]\n", "job.yaml", {"nodes.join_timeout_s=1"}), SpecError);
}

#include <doctest/doctest.h>

#include "cli/spec/spec.h"
#include "tests/unit/spec_only_error.h"

using namespace dtrain::spec;
using Instrument = Spec::Health::Instrument;

TEST_CASE("health.instrument: auto by default, off in YAML or with --set, nothing else") {
  const std::string base = "name: x\ncommand: [python3, train.py]\n";
  CHECK(load_spec_string(base, "job.yaml", {}).health.instrument == Instrument::automatic);
  CHECK(load_spec_string(base + "health: {instrument: off}\n", "job.yaml", {}).health.instrument == Instrument::off);
  CHECK(load_spec_string(base + "health: {instrument: auto}\n", "job.yaml", {}).health.instrument ==
        Instrument::automatic);
  CHECK(load_spec_string(base, "job.yaml", {"health.instrument=off"}).health.instrument == Instrument::off);
  CHECK(only_error(base + "health: {instrument: of}\n") ==
        "job.yaml:3:22: health.instrument: expected auto or off, got 'of'. Did you mean 'off'?");
  CHECK(only_error(base + "health: {instrument: [auto]}\n").find("health.instrument: expected auto or off") !=
        std::string::npos);
  CHECK(only_error(base, {"health.instrument=none"}).find("health.instrument") != std::string::npos);
}

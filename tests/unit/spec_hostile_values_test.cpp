#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "cli/spec/spec.h"
#include "tests/unit/spec_only_error.h"

using namespace dtrain::spec;

namespace {

const std::string kBase = "name: x\ncommand: [a]\n";

// A spec whose env holds `uses` aliases of one anchored value of `bytes` bytes.
std::string aliased_env(std::size_t bytes, std::size_t uses) {
  std::string yaml = kBase + "env:\n  BIG: &big " + std::string(bytes, 'v') + "\n";
  for (std::size_t i = 0; i < uses; ++i) yaml += "  V" + std::to_string(i) + ": *big\n";
  return yaml;
}

}  // namespace

TEST_CASE("spec aliases: 6,000 uses of a 100 KB anchor are refused at once, naming the limit and the anchor") {
  const std::string yaml = aliased_env(100 * 1024, 6000);
  CHECK(yaml.size() < 200 * 1024);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = only_error(yaml);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(error == "job.yaml:4:8: the spec expands to more than 4194304 bytes once its aliases (*name) are replaced "
                 "by their anchors' values. The value here is repeated too often. Use an alias for a small shared "
                 "value, not to repeat a large one many times.");
}

TEST_CASE("spec aliases: nested aliases of empty lists (billion laughs) run out of the budget too") {
  std::string yaml = kBase + "env:\n  L0: &l0 []\n";
  for (int level = 1; level < 10; ++level) {
    yaml += "  L" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) yaml += std::string(i ? ", " : "") + "*l" + std::to_string(level - 1);
    yaml += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  CHECK(only_error(yaml).find("the spec expands to more than 4194304 bytes") != std::string::npos);
  // Unbounded, the expansion would be 10^9 empty lists; within the budget it is refused in milliseconds (3 s: a
  // loaded machine once took 1.2 s).
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
}

TEST_CASE("spec aliases: a few aliases of a shared value still read") {
  const Spec spec = load_spec_string(aliased_env(1000, 3), "job.yaml", {});
  CHECK(spec.env.at("V2") == std::string(1000, 'v'));
}

TEST_CASE("spec aliases: a --set value expanding past the budget is refused") {
  std::string value = "{a: &a " + std::string(100 * 1024, 'w') + ", l: [";
  for (int i = 0; i < 60; ++i) value += std::string(i ? ", " : "") + "*a";
  value += "]}";
  CHECK(only_error(kBase, {"env=" + value}).find("the spec expands to more than 4194304 bytes") !=
        std::string::npos);
}

TEST_CASE("spec messages: a NUL or ESC in a key is shown escaped, and the message goes on past it") {
  const std::string yaml = kBase + "env:\n  \"A\\0B\\e\": 1\n";
  CHECK(only_error(yaml) == "job.yaml:4:3: env.A\\x00B\\x1b: 'A\\x00B\\x1b' is not an environment variable name. Use "
                            "letters, digits and '_', not starting with a digit.");
}

TEST_CASE("spec messages: a number just past a limit is shown with every digit it has") {
  CHECK(only_error(kBase + "stop: {grace_s: 604800.0000001}\n") ==
        "job.yaml:3:17: stop.grace_s: must be at most 604800 seconds (7 days), got 604800.0000001. Use 0 to turn it "
        "off.");
}

TEST_CASE("spec messages: .nan and .inf are named as such, with what the key expects") {
  CHECK(only_error(kBase + "health: {straggler_ratio: .nan}\n") ==
        "job.yaml:3:27: health.straggler_ratio: expected a number above 1, got '.nan' (not a number).");
  CHECK(only_error(kBase + "stop: {grace_s: -.inf}\n") ==
        "job.yaml:3:17: stop.grace_s: expected a number of seconds, got '-.inf' (infinite).");
}

// `dtrain plan --from RUN_DIR` (cli/plan/measured/measured_run.h) on recorded run directories: a DDP script with one
// rank starved of data, and dtrain-trainer on 2 nodes. The measures are the run's, the bottleneck is named, and the
// remedies carry the lines a user would change, largest gain first.

#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli/plan/measured/measured_run.h"

namespace plan_measured_test {

const std::string kRuns = DTRAIN_RUN_FIXTURES;

bool any_line_has(const dtrain::plan::Remedy& remedy, const std::string& part) {
  for (const std::string& line : remedy.lines) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST_CASE("a data-starved straggler: the bottleneck is its data wait, the remedy the DataLoader's workers") {
  const auto advice = dtrain::plan::advise_from_run(kRuns + "/ddp-data-starved");
  REQUIRE_MESSAGE(advice.ok(), advice.status.message());
  const auto& a = advice.value;
  CHECK(a.run.ranks == 4);
  CHECK(a.run.nodes == 2);
  CHECK_FALSE(a.run.trainer);
  CHECK(a.stragglers == std::vector<unsigned>{2});
  CHECK(a.bottleneck == "data");
  CHECK(a.bottleneck_share > 0.5);
  REQUIRE_FALSE(a.remedies.empty());
  CHECK(any_line_has(a.remedies.front(), "num_workers="));
  CHECK(a.remedies.front().gain_ms == doctest::Approx(a.run.data_wait_ms));
  // The others' exposed communication is waiting for rank 2: no communication remedy.
  for (const auto& r : a.remedies) CHECK_FALSE(any_line_has(r, "no_sync"));
  const auto json = nlohmann::json::parse(dtrain::plan::render_advice_json(a));
  CHECK(json["bottleneck"] == "data");
  CHECK(json["stragglers"] == nlohmann::json::array({2}));
  CHECK(dtrain::plan::render_advice_text(a).find("straggler rank(s) 2") != std::string::npos);
}

TEST_CASE("dtrain-trainer on 2 nodes: communication, with the trainer's own flags as the lines to change") {
  const auto advice = dtrain::plan::advise_from_run(kRuns + "/trainer-restart");
  REQUIRE_MESSAGE(advice.ok(), advice.status.message());
  const auto& a = advice.value;
  CHECK(a.run.trainer);
  CHECK(a.run.precision == "fp32");
  CHECK(a.bottleneck == "communication");
  REQUIRE_FALSE(a.remedies.empty());
  CHECK(any_line_has(a.remedies.front(), "--grad-accum 4"));
  CHECK(a.remedies.front().gain_ms == doctest::Approx(a.run.comm_exposed_ms * 3 / 4));
  for (std::size_t i = 1; i < a.remedies.size(); ++i) CHECK(a.remedies[i - 1].gain_ms >= a.remedies[i].gain_ms);
  for (const auto& r : a.remedies) CHECK_FALSE(any_line_has(r, "DataLoader"));  // Python lines are for scripts
}

TEST_CASE("a directory that is no run is refused, naming it") {
  const auto advice = dtrain::plan::advise_from_run(kRuns + "/no-such-run");
  REQUIRE_FALSE(advice.ok());
  CHECK(advice.status.message().find("--from " + kRuns + "/no-such-run") != std::string::npos);
}

}  // namespace plan_measured_test

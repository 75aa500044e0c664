// A worker's per-step points (common/report/step_points.h): the one merge-and-thin rule, and what the agent refuses
// of them (agent/health/report_values.h).

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "agent/health/report_values.h"
#include "common/report/report_fields.h"
#include "common/report/step_points.h"

namespace fields_step_points_test {

using dtrain::StepPoint;

// Steps first..last, loss falling slowly, with one spike of 9 at `spike` and one dip of -1 at `dip`.
std::vector<StepPoint> steps(std::uint64_t first, std::uint64_t last, std::uint64_t spike = 0, std::uint64_t dip = 0) {
  std::vector<StepPoint> out;
  for (std::uint64_t s = first; s <= last; ++s) {
    const double loss = s == spike ? 9.0 : s == dip ? -1.0 : 5.0 - 0.001 * static_cast<double>(s);
    out.push_back({s, loss, 10.0 + static_cast<double>(s), 1000.0});
  }
  return out;
}

bool has_step(const std::vector<StepPoint>& points, std::uint64_t step) {
  for (const auto& p : points) {
    if (p.step == step) return true;
  }
  return false;
}

TEST_CASE("points that fit are kept as they are; over the bound, the first, the last, and each group's min and max") {
  std::vector<StepPoint> few = steps(1, 64);
  dtrain::thin_points(few, dtrain::kMaxStepPoints);
  CHECK(few == steps(1, 64));

  std::vector<StepPoint> many = steps(1, 1000, /*spike=*/377, /*dip=*/611);
  dtrain::thin_points(many, dtrain::kMaxStepPoints);
  CHECK(many.size() <= dtrain::kMaxStepPoints);
  CHECK(many.size() >= dtrain::kMaxStepPoints - 2);
  CHECK(many.front().step == 1);
  CHECK(many.back().step == 1000);
  CHECK(has_step(many, 377));   // the spike and the dip survive thinning
  CHECK(has_step(many, 611));
  for (std::size_t i = 1; i < many.size(); ++i) CHECK(many[i - 1].step < many[i].step);
  // Evenly: no gap between kept steps is much wider than 1000 / 31 groups.
  for (std::size_t i = 1; i < many.size(); ++i) CHECK(many[i].step - many[i - 1].step <= 2 * 1000 / 31 + 2);
}

TEST_CASE("merging keeps the older points first, drops the ones a newer report repeats, and stays bounded") {
  std::vector<StepPoint> older = steps(1, 10);
  dtrain::merge_points(older, steps(11, 20), dtrain::kMaxStepPoints);
  CHECK(older == steps(1, 20));
  // A resend of steps 18..25 (or a restart from 18): the newer report's points win.
  std::vector<StepPoint> newer = steps(18, 25);
  for (auto& p : newer) p.loss = 0.5;
  dtrain::merge_points(older, newer, dtrain::kMaxStepPoints);
  REQUIRE(older.size() == 25);
  CHECK(older[16].loss != 0.5);
  CHECK(older[17].loss == 0.5);
  // 300 reports of one step each, coalesced one after another: bounded, ends kept.
  std::vector<StepPoint> window;
  for (const StepPoint& p : steps(1, 300, /*spike=*/150)) dtrain::merge_points(window, std::span(&p, 1), 64);
  CHECK(window.size() <= 64);
  CHECK(window.front().step == 1);
  CHECK(window.back().step == 300);
  CHECK(has_step(window, 150));
}

dtrain::v1::WorkerReport with_points(const std::vector<StepPoint>& points) {
  dtrain::v1::WorkerReport report;
  dtrain::set_points(report, points);
  return report;
}

std::string refusal(const std::vector<StepPoint>& points) {
  const dtrain::Status status = dtrain::agent::check_report_values(with_points(points));
  return status.ok() ? "" : status.message();
}

TEST_CASE("the agent refuses points that cannot be real, naming the point") {
  CHECK(refusal(steps(1, 64)).empty());
  CHECK(refusal({{5, -0.5, 0, 0}}).empty());   // a negative loss is a loss (not every objective is cross-entropy)
  CHECK(refusal(steps(1, 65)).find("at most 64") != std::string::npos);
  CHECK(refusal({{5, 1, 1, 1}, {5, 1, 1, 1}}).find("points[1] (step 5): the steps must increase") !=
        std::string::npos);
  CHECK(refusal({{6, 1, 1, 1}, {5, 1, 1, 1}}).find("must increase") != std::string::npos);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(refusal({{1, 1, 1, 1}, {2, nan, 1, 1}}).find("points[1] (step 2): the loss is nan") != std::string::npos);
  CHECK(refusal({{1, inf, 1, 1}}).find("loss") != std::string::npos);
  CHECK(refusal({{1, 1, -3, 1}}).find("step_ms is -3") != std::string::npos);
  CHECK(refusal({{1, 1, 1e12, 1}}).find("a week") != std::string::npos);
  CHECK(refusal({{1, 1, 1, -1}}).find("tokens_per_s is -1") != std::string::npos);
  CHECK(refusal({{1, 1, 1, inf}}).find("tokens_per_s is inf") != std::string::npos);
  CHECK(refusal({{std::numeric_limits<std::uint64_t>::max(), 1, 1, 1}}).find("2^53") != std::string::npos);
}

}  // namespace fields_step_points_test

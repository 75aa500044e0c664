// A pipeline's fields of report.proto's WorkerReport (common/report/report_fields.h): pipeline_bubble_ms and the
// rank's grid place (tp_rank, tp_size, pp_stage, pp_size) go there and back, the agent bounds them as it bounds the
// other times and counts (agent/health/report_values.h), and the launcher's one name of a rank with its place
// (common/report/grid_place.h).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "agent/health/report_values.h"
#include "common/report/grid_place.h"
#include "common/report/report_fields.h"

namespace fields_pipeline_test {

using dtrain::GridPlace;
using dtrain::HealthValues;
using dtrain::agent::check_report_values;

// A stage of a 2 x 2 grid, as dtrain-trainer reports it.
HealthValues stage_report() {
  HealthValues v;
  v.rank = 3;
  v.step = 12;
  v.step_ms = 40;
  v.compute_ms = 20;
  v.pipeline_bubble_ms = 17.5;
  v.tp_rank = 1;
  v.tp_size = 2;
  v.pp_stage = 1;
  v.pp_size = 2;
  return v;
}

TEST_CASE("the bubble and the grid place go into the message and back") {
  dtrain::v1::WorkerReport report;
  dtrain::to_report(stage_report(), report);
  CHECK(report.pipeline_bubble_ms() == 17.5);
  CHECK(report.tp_rank() == 1);
  CHECK(report.tp_size() == 2);
  CHECK(report.pp_stage() == 1);
  CHECK(report.pp_size() == 2);
  const HealthValues back = dtrain::values_of(report);
  CHECK(back.pipeline_bubble_ms == 17.5);
  const GridPlace place = dtrain::grid_place_of(back);
  CHECK(place.tp_rank == 1);
  CHECK(place.tp_size == 2);
  CHECK(place.pp_stage == 1);
  CHECK(place.pp_size == 2);
  CHECK(check_report_values(report).ok());
}

TEST_CASE("the agent refuses a bubble that is not a time, naming it") {
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(),
                     dtrain::agent::kMaxReportedMs * 2}) {
    CAPTURE(bad);
    dtrain::v1::WorkerReport report;
    report.set_pipeline_bubble_ms(bad);
    const dtrain::Status refused = check_report_values(report);
    CHECK(refused.code() == dtrain::StatusCode::invalid_argument);
    CHECK(refused.message().find("pipeline_bubble_ms") != std::string::npos);
  }
  dtrain::v1::WorkerReport week;
  week.set_pipeline_bubble_ms(dtrain::agent::kMaxReportedMs);
  CHECK(check_report_values(week).ok());
}

TEST_CASE("the agent refuses a grid place outside its size, or a size past the largest job, naming the field") {
  const auto refused_naming = [](const dtrain::v1::WorkerReport& report, const std::string& field) {
    const dtrain::Status status = check_report_values(report);
    CHECK(status.code() == dtrain::StatusCode::invalid_argument);
    CHECK(status.message().find(field) != std::string::npos);
  };
  dtrain::v1::WorkerReport r;
  r.set_pp_size(2);
  r.set_pp_stage(2);
  refused_naming(r, "pp_stage 2 is not below pp_size 2");
  r.set_pp_stage(1);
  CHECK(check_report_values(r).ok());
  r.set_tp_rank(1);   // a place without its size: not known, so no place either
  refused_naming(r, "tp_rank 1 is not below tp_size 0");
  r.set_tp_size(dtrain::agent::kMaxReportedGridSize + 1);
  refused_naming(r, "tp_size");
  r.set_tp_size(dtrain::agent::kMaxReportedGridSize);
  CHECK(check_report_values(r).ok());
  // A report that says nothing of a grid (a script's) is a report like any other.
  CHECK(check_report_values(dtrain::v1::WorkerReport{}).ok());
}

TEST_CASE("a rank is named with its place only where the grid splits the model") {
  CHECK(dtrain::rank_name(3) == "rank 3");
  CHECK(dtrain::rank_name(3, {0, 1, 0, 1}) == "rank 3");   // sizes 1: nothing is split
  CHECK(dtrain::rank_name(3, {0, 0, 1, 2}) == "rank 3 (pipeline stage 1 of 2)");
  CHECK(dtrain::rank_name(3, {1, 2, 0, 0}) == "rank 3 (tensor-parallel rank 1 of 2)");
  CHECK(dtrain::rank_name(3, {1, 2, 1, 2}) == "rank 3 (pipeline stage 1 of 2, tensor-parallel rank 1 of 2)");
  CHECK(dtrain::grid_place_text({}).empty());
  CHECK(GridPlace{0, 1, 0, 2}.pipelined());
  CHECK(!GridPlace{1, 2, 0, 1}.pipelined());
  CHECK(GridPlace{1, 2, 0, 1}.split());
}

}  // namespace fields_pipeline_test

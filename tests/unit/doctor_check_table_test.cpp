// The check table's driver: the contract in agent/node/doctor/check_table.h, row by row.

#include <doctest/doctest.h>

#include "agent/node/doctor/check_table.h"

using namespace dtrain::node::doctor;

namespace {

struct Facts {
  int value = 0;
};

using Row = CheckRow<Facts>;

Finding by_value(const Facts& f) {
  if (f.value > 10) return {Status::fail, "too big"};
  if (f.value > 5) return {Status::warn, "big"};
  return {Status::pass, "small"};
}

}  // namespace

TEST_CASE("rows run in order; a pass carries no fix, a warn and a fail carry the row's") {
  std::vector<Row> rows = {{"a.first", {}, by_value, "shrink it a little", "shrink it a lot"},
                           {"a.second", {}, by_value, "shrink it a little", "shrink it a lot"}};
  auto checks = run_checks(rows, Facts{1});
  REQUIRE(checks.size() == 2);
  CHECK(checks[0].id == "a.first");
  CHECK(checks[1].id == "a.second");
  CHECK(checks[0].status == Status::pass);
  CHECK(checks[0].fix.empty());
  CHECK(run_checks(rows, Facts{7})[0].fix == "shrink it a little");
  CHECK(run_checks(rows, Facts{70})[0].fix == "shrink it a lot");
}

TEST_CASE("a skip predicate that says why makes a skip without a fix, and evaluate is not called") {
  bool evaluated = false;
  Row row{"a.skipped", [](const Facts& f) -> std::optional<std::string> {
            if (f.value < 0) return "negative";
            return std::nullopt;
          },
          [&](const Facts& f) -> Finding {
            evaluated = true;
            return by_value(f);
          },
          "", "fail fix"};
  auto checks = run_checks(std::vector<Row>{row}, Facts{-1});
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].status == Status::skip);
  CHECK(checks[0].message == "negative");
  CHECK(checks[0].fix.empty());
  CHECK(!evaluated);
  CHECK(run_checks(std::vector<Row>{row}, Facts{20})[0].status == Status::fail);
  CHECK(evaluated);
}

TEST_CASE("a finding's own fix replaces the row's; a row with nothing to report adds no check") {
  Row own{"a.own", {}, [](const Facts& f) -> Finding { return {Status::fail, "x", "fix " + std::to_string(f.value)}; },
          "", "row fix"};
  Row quiet{"a.quiet", {}, [](const Facts&) -> std::optional<Finding> { return std::nullopt; }, "", ""};
  Row skips_late{"a.late", {}, [](const Facts&) -> Finding { return {Status::skip, "not here", "ignored"}; }, "", ""};
  auto checks = run_checks(std::vector<Row>{own, quiet, skips_late}, Facts{3});
  REQUIRE(checks.size() == 2);
  CHECK(checks[0].fix == "fix 3");
  CHECK(checks[1].id == "a.late");
  CHECK(checks[1].status == Status::skip);
  CHECK(checks[1].fix.empty());
}

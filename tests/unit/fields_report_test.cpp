// report.proto's WorkerReport described once (common/report/report_fields.h): the rows match the message's
// descriptor field by field (name, number, type, none missing, none twice), to_report and values_of carry every field
// there and back, and the agent's value checks (agent/health/report_values.h) bound every number field the rows name.

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include <doctest/doctest.h>

#include "agent/health/report_values.h"
#include "common/report/report_fields.h"

namespace fields_report_test {

using google::protobuf::FieldDescriptor;
using dtrain::ReportField;

// Each row as (number -> (name, the protobuf type its accessors need)), failing on a number named twice.
template <class T>
void collect(std::span<const ReportField<T>> rows, FieldDescriptor::Type type,
             std::map<int, std::pair<std::string, FieldDescriptor::Type>>& out) {
  for (const auto& row : rows) {
    CAPTURE(row.name);
    CHECK(out.emplace(row.number, std::pair{std::string(row.name), type}).second);
  }
}

TEST_CASE("the rows are report.proto's WorkerReport, field by field") {
  std::map<int, std::pair<std::string, FieldDescriptor::Type>> rows;
  collect(dtrain::report_amounts(), FieldDescriptor::TYPE_DOUBLE, rows);
  collect(dtrain::report_counts(), FieldDescriptor::TYPE_UINT64, rows);
  collect(dtrain::report_ids(), FieldDescriptor::TYPE_UINT32, rows);
  collect(dtrain::report_flags(), FieldDescriptor::TYPE_BOOL, rows);
  collect(dtrain::report_texts(), FieldDescriptor::TYPE_BYTES, rows);
  const auto* descriptor = dtrain::v1::WorkerReport::descriptor();
  // Every field but the one repeated one, points, which points_of and set_points convert.
  CHECK(rows.size() + 1 == static_cast<std::size_t>(descriptor->field_count()));
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    CAPTURE(field->name());
    if (field->name() == "points") {
      CHECK(field->is_repeated());
      CHECK(field->message_type() == dtrain::v1::StepPoint::descriptor());
      continue;
    }
    const auto row = rows.find(field->number());
    REQUIRE(row != rows.end());
    CHECK(row->second.first == field->name());
    CHECK(row->second.second == field->type());
    CHECK(!field->is_repeated());
  }
}

TEST_CASE("to_report and values_of carry every field, there and back") {
  // A distinct value in every field, set through the message's reflection (not through the rows under test).
  dtrain::v1::WorkerReport original;
  const auto* descriptor = original.GetDescriptor();
  const auto* reflection = original.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* f = descriptor->field(i);
    const int n = f->number();
    switch (f->type()) {
      case FieldDescriptor::TYPE_DOUBLE: reflection->SetDouble(&original, f, n + 0.5); break;
      case FieldDescriptor::TYPE_UINT64: reflection->SetUInt64(&original, f, 1000 + n); break;
      case FieldDescriptor::TYPE_UINT32: reflection->SetUInt32(&original, f, 100 + n); break;
      case FieldDescriptor::TYPE_BOOL: reflection->SetBool(&original, f, true); break;
      case FieldDescriptor::TYPE_BYTES: reflection->SetString(&original, f, "field " + std::to_string(n)); break;
      case FieldDescriptor::TYPE_MESSAGE:
        if (f->name() != "points") FAIL("a WorkerReport message field the rows do not cover: " << f->name());
        for (std::uint64_t step : {7, 9}) {
          auto* p = original.add_points();
          p->set_step(step);
          p->set_loss(step + 0.25);
          p->set_step_ms(step + 0.5);
          p->set_tokens_per_s(step + 0.75);
        }
        break;
      default: FAIL("a WorkerReport field of a type the rows do not cover: " << f->name());
    }
  }
  const dtrain::HealthValues values = dtrain::values_of(original);
  CHECK(values.quiet);
  CHECK(values.phase == "field 14");
  CHECK(values.samples_per_s == 23.5);
  REQUIRE(values.points.size() == 2);
  CHECK(values.points[1] == dtrain::StepPoint{9, 9.25, 9.5, 9.75});
  dtrain::v1::WorkerReport copy;
  dtrain::to_report(values, copy);
  CHECK(copy.SerializeAsString() == original.SerializeAsString());
}

TEST_CASE("the agent bounds every number field the rows name") {
  // steps_done is a count of the sender's own steps, judged by the launcher against its step; rank is judged by the
  // token check. Every other number field has a bound, and a report past it is refused naming the field.
  const std::set<std::string> unbounded = {"steps_done", "rank"};
  for (const auto& row : dtrain::report_amounts()) {
    CAPTURE(row.name);
    dtrain::v1::WorkerReport report;
    row.set(report, std::numeric_limits<double>::quiet_NaN());
    const dtrain::Status refused = dtrain::agent::check_report_values(report);
    CHECK(!refused.ok());
    CHECK(refused.message().find(row.name) != std::string::npos);
  }
  for (const auto& row : dtrain::report_counts()) {
    if (unbounded.count(row.name)) continue;
    CAPTURE(row.name);
    dtrain::v1::WorkerReport report;
    row.set(report, std::numeric_limits<std::uint64_t>::max());
    const dtrain::Status refused = dtrain::agent::check_report_values(report);
    CHECK(!refused.ok());
    CHECK(refused.message().find(row.name) != std::string::npos);
  }
  for (const auto& row : dtrain::report_ids()) {
    if (unbounded.count(row.name)) continue;
    CAPTURE(row.name);
    dtrain::v1::WorkerReport report;
    row.set(report, std::numeric_limits<std::uint32_t>::max());
    CHECK(!dtrain::agent::check_report_values(report).ok());
  }
}

}  // namespace fields_report_test

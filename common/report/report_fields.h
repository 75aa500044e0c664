#pragma once

// report.proto's WorkerReport described once: a row per field with its name (also a health datagram's JSON key,
// agent/service/health_socket.h), its number, its member of HealthValues, and its accessors on the message. The
// worker's client (to_report), the agent's health socket (the rows by name) and the launcher's wire layer
// (values_of) all use these rows, so a field is added here, in report.proto and in HealthValues. Rows by the
// field's type; unit.fields checks them against report.proto's descriptor, field by field. The one repeated field,
// points (StepPoint messages), has no row: points_of and set_points convert it, and to_report and values_of carry it.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/report/health_values.h"
#include "dtrain/v1/report.pb.h"

namespace dtrain {

template <class T>
struct ReportField {
  const char* name;  // report.proto's field name
  int number;        // report.proto's field number
  T HealthValues::*member;
  T (*get)(const v1::WorkerReport& report);
  void (*set)(v1::WorkerReport& report, T value);
};

std::span<const ReportField<double>> report_amounts();        // double fields
std::span<const ReportField<std::uint64_t>> report_counts();  // uint64 fields
std::span<const ReportField<std::uint32_t>> report_ids();     // uint32 fields: rank, dump_signal, the grid place
std::span<const ReportField<bool>> report_flags();            // bool fields
std::span<const ReportField<std::string>> report_texts();     // bytes fields: phase, device_name

// The report's points, and back (replacing what `report` held).
std::vector<StepPoint> points_of(const v1::WorkerReport& report);
void set_points(v1::WorkerReport& report, std::span<const StepPoint> points);

// Every field of `values` into `report`, and back.
void to_report(const HealthValues& values, v1::WorkerReport& report);
HealthValues values_of(const v1::WorkerReport& report);

}  // namespace dtrain

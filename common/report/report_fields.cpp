#include "common/report/report_fields.h"

#include <utility>

namespace dtrain {
namespace {

using R = v1::WorkerReport;

// One row: the field's name, number, HealthValues member and message accessors, all from the one name.
#define DTRAIN_REPORT_FIELD(T, field, number)                                                          \
  ReportField<T> {                                                                                     \
    #field, number, &HealthValues::field, [](const R& r) -> T { return r.field(); },                  \
        [](R& r, T value) { r.set_##field(std::move(value)); }                                         \
  }

const ReportField<double> kAmounts[] = {
    DTRAIN_REPORT_FIELD(double, loss, 3),           DTRAIN_REPORT_FIELD(double, tokens_per_s, 4),
    DTRAIN_REPORT_FIELD(double, step_ms, 7),        DTRAIN_REPORT_FIELD(double, data_wait_ms, 8),
    DTRAIN_REPORT_FIELD(double, compute_ms, 9),     DTRAIN_REPORT_FIELD(double, comm_exposed_ms, 10),
    DTRAIN_REPORT_FIELD(double, optimizer_ms, 11),  DTRAIN_REPORT_FIELD(double, loss_scale, 21),
    DTRAIN_REPORT_FIELD(double, samples_per_s, 23), DTRAIN_REPORT_FIELD(double, model_flops_per_token, 28),
    DTRAIN_REPORT_FIELD(double, pipeline_bubble_ms, 31),
};
const ReportField<std::uint64_t> kCounts[] = {
    DTRAIN_REPORT_FIELD(std::uint64_t, step, 2),
    DTRAIN_REPORT_FIELD(std::uint64_t, rss_bytes, 5),
    DTRAIN_REPORT_FIELD(std::uint64_t, steps_done, 6),
    DTRAIN_REPORT_FIELD(std::uint64_t, device_mem_used_bytes, 12),
    DTRAIN_REPORT_FIELD(std::uint64_t, device_mem_total_bytes, 13),
    DTRAIN_REPORT_FIELD(std::uint64_t, mem_params_bytes, 15),
    DTRAIN_REPORT_FIELD(std::uint64_t, mem_grads_bytes, 16),
    DTRAIN_REPORT_FIELD(std::uint64_t, mem_optim_bytes, 17),
    DTRAIN_REPORT_FIELD(std::uint64_t, mem_activations_bytes, 18),
    DTRAIN_REPORT_FIELD(std::uint64_t, mem_gathered_peak_bytes, 19),
    DTRAIN_REPORT_FIELD(std::uint64_t, comm_bytes, 20),
    DTRAIN_REPORT_FIELD(std::uint64_t, device_mem_peak_bytes, 24),
    DTRAIN_REPORT_FIELD(std::uint64_t, model_params, 27),
};
const ReportField<std::uint32_t> kIds[] = {
    DTRAIN_REPORT_FIELD(std::uint32_t, rank, 1),
    DTRAIN_REPORT_FIELD(std::uint32_t, dump_signal, 22),
    DTRAIN_REPORT_FIELD(std::uint32_t, tp_rank, 32),
    DTRAIN_REPORT_FIELD(std::uint32_t, tp_size, 33),
    DTRAIN_REPORT_FIELD(std::uint32_t, pp_stage, 34),
    DTRAIN_REPORT_FIELD(std::uint32_t, pp_size, 35),
};
const ReportField<bool> kFlags[] = {
    DTRAIN_REPORT_FIELD(bool, exiting, 25),
    DTRAIN_REPORT_FIELD(bool, quiet, 26),
};
const ReportField<std::string> kTexts[] = {
    DTRAIN_REPORT_FIELD(std::string, phase, 14),
    DTRAIN_REPORT_FIELD(std::string, device_name, 29),
};

#undef DTRAIN_REPORT_FIELD

template <class T>
void copy_out(const HealthValues& values, R& report, std::span<const ReportField<T>> fields) {
  for (const auto& field : fields) field.set(report, values.*field.member);
}

template <class T>
void copy_in(const R& report, HealthValues& values, std::span<const ReportField<T>> fields) {
  for (const auto& field : fields) values.*field.member = field.get(report);
}

}  // namespace

std::span<const ReportField<double>> report_amounts() { return kAmounts; }
std::span<const ReportField<std::uint64_t>> report_counts() { return kCounts; }
std::span<const ReportField<std::uint32_t>> report_ids() { return kIds; }
std::span<const ReportField<bool>> report_flags() { return kFlags; }
std::span<const ReportField<std::string>> report_texts() { return kTexts; }

std::vector<StepPoint> points_of(const R& report) {
  std::vector<StepPoint> points;
  points.reserve(static_cast<std::size_t>(report.points_size()));
  for (const auto& p : report.points()) points.push_back({p.step(), p.loss(), p.step_ms(), p.tokens_per_s()});
  return points;
}

void set_points(R& report, std::span<const StepPoint> points) {
  report.clear_points();
  for (const StepPoint& p : points) {
    v1::StepPoint* out = report.add_points();
    out->set_step(p.step);
    out->set_loss(p.loss);
    out->set_step_ms(p.step_ms);
    out->set_tokens_per_s(p.tokens_per_s);
  }
}

void to_report(const HealthValues& values, R& report) {
  copy_out(values, report, report_amounts());
  copy_out(values, report, report_counts());
  copy_out(values, report, report_ids());
  copy_out(values, report, report_flags());
  copy_out(values, report, report_texts());
  set_points(report, values.points);
}

HealthValues values_of(const R& report) {
  HealthValues values;
  copy_in(report, values, report_amounts());
  copy_in(report, values, report_counts());
  copy_in(report, values, report_ids());
  copy_in(report, values, report_flags());
  copy_in(report, values, report_texts());
  values.points = points_of(report);
  return values;
}

}  // namespace dtrain

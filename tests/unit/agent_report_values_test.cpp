// What the agent accepts from a worker's health report and what it forwards: every bounded field is refused past
// its bound (never a crash, an INVALID_ARGUMENT naming the field), a phase is cut to valid UTF-8 of at most 128
// bytes, and health_of carries every WorkerReport field inside WorkerHealth (found by reflection, so a field added to
// WorkerReport and lost on the way fails here).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "agent/health/report_values.h"
#include "agent/session/wire.h"

namespace v1 = dtrain::v1;
using dtrain::StatusCode;
using dtrain::agent::check_report_values;
using dtrain::agent::wire::health_of;
using dtrain::agent::phase_of;
using dtrain::agent::device_name_of;

namespace {

// A report every value of which is plausible: a step of a real run.
v1::WorkerReport plausible() {
  v1::WorkerReport r;
  r.set_rank(1);
  r.set_step(100);
  r.set_loss(2.5);
  r.set_tokens_per_s(12000);
  r.set_samples_per_s(12.5);
  r.set_rss_bytes(std::uint64_t{3} << 30);
  r.set_step_ms(200);
  r.set_data_wait_ms(1);
  r.set_compute_ms(150);
  r.set_comm_exposed_ms(20);
  r.set_optimizer_ms(25);
  r.set_device_mem_used_bytes(std::uint64_t{40} << 30);
  r.set_device_mem_total_bytes(std::uint64_t{80} << 30);
  r.set_device_mem_peak_bytes(std::uint64_t{36} << 30);
  r.set_phase("allreduce bucket 3");
  r.set_mem_params_bytes(1000);
  r.set_mem_grads_bytes(2000);
  r.set_mem_optim_bytes(3000);
  r.set_mem_activations_bytes(4000);
  r.set_mem_gathered_peak_bytes(5000);
  r.set_comm_bytes(6000);
  r.set_loss_scale(65536);
  r.set_dump_signal(10);
  r.set_model_params(124'475'904);
  r.set_model_flops_per_token(860'101'632);
  r.set_device_name("NVIDIA H100 80GB HBM3");
  return r;
}

// The refusal of `report`, which must be invalid_argument and name `field`.
void check_refused(const v1::WorkerReport& report, const std::string& field) {
  const dtrain::Status status = check_report_values(report);
  CHECK(status.code() == StatusCode::invalid_argument);
  CHECK_MESSAGE(status.message().find(field) != std::string::npos, status.message());
}

}  // namespace

TEST_CASE("a plausible report passes, and so does an empty one (0 is 'not known')") {
  CHECK(check_report_values(plausible()).ok());
  CHECK(check_report_values(v1::WorkerReport{}).ok());
}

TEST_CASE("every time, throughput and loss scale must be finite and not negative") {
  using Setter = void (v1::WorkerReport::*)(double);
  const std::pair<const char*, Setter> fields[] = {
      {"tokens_per_s", &v1::WorkerReport::set_tokens_per_s}, {"samples_per_s", &v1::WorkerReport::set_samples_per_s},
      {"step_ms", &v1::WorkerReport::set_step_ms},
      {"data_wait_ms", &v1::WorkerReport::set_data_wait_ms}, {"compute_ms", &v1::WorkerReport::set_compute_ms},
      {"comm_exposed_ms", &v1::WorkerReport::set_comm_exposed_ms},
      {"optimizer_ms", &v1::WorkerReport::set_optimizer_ms}, {"loss_scale", &v1::WorkerReport::set_loss_scale},
  };
  const double bad[] = {-1.0, std::nan(""), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (const auto& [name, set] : fields) {
    for (double value : bad) {
      CAPTURE(name);
      CAPTURE(value);
      v1::WorkerReport r = plausible();
      (r.*set)(value);
      check_refused(r, name);
    }
  }
}

TEST_CASE("a refused samples_per_s says its value and what it must be") {
  v1::WorkerReport r = plausible();
  r.set_samples_per_s(-8);
  CHECK(check_report_values(r).message() == "samples_per_s is -8; it must be a finite number, 0 or more");
  r.set_samples_per_s(std::numeric_limits<double>::infinity());
  CHECK(check_report_values(r).message() == "samples_per_s is inf; it must be a finite number, 0 or more");
  r.set_samples_per_s(std::nan(""));
  CHECK(check_report_values(r).message() == "samples_per_s is nan; it must be a finite number, 0 or more");
  r.set_samples_per_s(0);   // not known
  CHECK(check_report_values(r).ok());
}

TEST_CASE("a device peak past 1 PiB is refused with its value and the bound") {
  v1::WorkerReport r = plausible();
  r.set_device_mem_peak_bytes(r.device_mem_total_bytes());   // a process that filled the device
  CHECK(check_report_values(r).ok());
  r.set_device_mem_peak_bytes(dtrain::agent::kMaxReportedBytes + 1);
  CHECK(check_report_values(r).message() ==
        "device_mem_peak_bytes 1125899906842625 is over 1125899906842624 (1 PiB); not a value this field can have");
}

TEST_CASE("times past a week, a loss scale past the largest float and a non-finite loss are refused") {
  v1::WorkerReport r = plausible();
  r.set_step_ms(dtrain::agent::kMaxReportedMs);
  CHECK(check_report_values(r).ok());
  r.set_step_ms(dtrain::agent::kMaxReportedMs * 1.01);
  check_refused(r, "step_ms");
  r = plausible();
  r.set_loss_scale(1e39);
  check_refused(r, "loss_scale");
  r = plausible();
  r.set_loss(-3);
  CHECK(check_report_values(r).ok());
  r.set_loss(std::nan(""));
  check_refused(r, "loss");
}

TEST_CASE("byte counts past 1 PiB, a step past 2^53 and a signal past SIGRTMAX are refused") {
  using Setter = void (v1::WorkerReport::*)(std::uint64_t);
  const std::pair<const char*, Setter> fields[] = {
      {"rss_bytes", &v1::WorkerReport::set_rss_bytes},
      {"device_mem_used_bytes", &v1::WorkerReport::set_device_mem_used_bytes},
      {"device_mem_total_bytes", &v1::WorkerReport::set_device_mem_total_bytes},
      {"device_mem_peak_bytes", &v1::WorkerReport::set_device_mem_peak_bytes},
      {"mem_params_bytes", &v1::WorkerReport::set_mem_params_bytes},
      {"mem_grads_bytes", &v1::WorkerReport::set_mem_grads_bytes},
      {"mem_optim_bytes", &v1::WorkerReport::set_mem_optim_bytes},
      {"mem_activations_bytes", &v1::WorkerReport::set_mem_activations_bytes},
      {"mem_gathered_peak_bytes", &v1::WorkerReport::set_mem_gathered_peak_bytes},
      {"comm_bytes", &v1::WorkerReport::set_comm_bytes},
  };
  for (const auto& [name, set] : fields) {
    CAPTURE(name);
    v1::WorkerReport r = plausible();
    (r.*set)(dtrain::agent::kMaxReportedBytes);
    CHECK(check_report_values(r).ok());
    (r.*set)(dtrain::agent::kMaxReportedBytes + 1);
    check_refused(r, name);
    (r.*set)(~std::uint64_t{0});   // a -1 sent as unsigned
    check_refused(r, name);
  }
  v1::WorkerReport r = plausible();
  r.set_step(~std::uint64_t{0});
  check_refused(r, "step");
  r = plausible();
  r.set_dump_signal(64);
  CHECK(check_report_values(r).ok());
  r.set_dump_signal(65);
  check_refused(r, "dump_signal");
  r.set_dump_signal(~std::uint32_t{0});
  check_refused(r, "dump_signal");
}

TEST_CASE("a phase is cut to at most 128 bytes, before its first byte that is not valid UTF-8") {
  CHECK(phase_of("forward") == "forward");
  CHECK(phase_of("") == "");
  CHECK(phase_of(std::string(500, 'x')) == std::string(128, 'x'));
  CHECK(phase_of("reduce \xC3\xA9t\xC3\xA9") == "reduce \xC3\xA9t\xC3\xA9");                 // two-byte letters
  CHECK(phase_of("ok\xFFrest") == "ok");                                                        // never a lead byte
  CHECK(phase_of("ok\xC3") == "ok");                                                            // truncated sequence
  CHECK(phase_of("ok\xC0\xAFx") == "ok");                                                       // overlong '/'
  CHECK(phase_of("ok\xED\xA0\x80x") == "ok");                                                   // a surrogate
  CHECK(phase_of("ok\xF4\x90\x80\x80x") == "ok");                                               // past U+10FFFF
  CHECK(phase_of("\xF0\x9F\x98\x80 grin") == "\xF0\x9F\x98\x80 grin");                          // four bytes
  CHECK(phase_of(std::string("a\0b", 3)) == std::string("a\0b", 3));                            // NUL is UTF-8
  // 127 ASCII bytes, then a two-byte letter that the 128-byte cut splits: the half letter goes too.
  CHECK(phase_of(std::string(127, 'x') + "\xC3\xA9") == std::string(127, 'x'));
}

TEST_CASE("health_of carries every field of WorkerReport inside WorkerHealth, and to_wire stamps the time") {
  v1::WorkerReport report;
  const auto* in = v1::WorkerReport::descriptor();
  const auto* reflection = report.GetReflection();
  // A distinct value per field, so a field copied into another's place shows.
  for (int i = 0; i < in->field_count(); ++i) {
    const auto* f = in->field(i);
    const int value = i + 2;
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32: reflection->SetUInt32(&report, f, value); break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64: reflection->SetUInt64(&report, f, value); break;
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE: reflection->SetDouble(&report, f, value + 0.5); break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL: reflection->SetBool(&report, f, true); break;
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        reflection->SetString(&report, f, "phase " + std::to_string(value));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE: {   // points: two steps
        REQUIRE(f->name() == "points");
        for (std::uint64_t step : {4, 6}) {
          auto* p = report.add_points();
          p->set_step(step);
          p->set_loss(step + 0.25);
          p->set_step_ms(step + 0.5);
          p->set_tokens_per_s(step + 0.75);
        }
        break;
      }
      default: FAIL("WorkerReport has a field of a type this test does not fill: " << f->name());
    }
  }
  REQUIRE(check_report_values(report).ok());
  const v1::AgentMessage message = dtrain::agent::wire::to_wire(health_of(report), 1234);
  CHECK(message.worker_health().unix_ms() == 1234);
  const v1::WorkerReport& health = message.worker_health().report();
  const auto* out = v1::WorkerReport::descriptor();
  int shared = 0;
  for (int i = 0; i < in->field_count(); ++i) {
    const auto* f = in->field(i);
    const auto* g = out->FindFieldByName(f->name());
    CAPTURE(f->name());
    REQUIRE_MESSAGE(g != nullptr, "WorkerHealth lacks WorkerReport's field " << f->name());
    REQUIRE(g->cpp_type() == f->cpp_type());
    ++shared;
    const auto* h = health.GetReflection();
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        CHECK(h->GetUInt32(health, g) == reflection->GetUInt32(report, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        CHECK(h->GetUInt64(health, g) == reflection->GetUInt64(report, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
        CHECK(h->GetDouble(health, g) == reflection->GetDouble(report, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        CHECK(h->GetBool(health, g) == reflection->GetBool(report, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE:
        CHECK(health.points_size() == 2);
        CHECK(health.points(1).SerializeAsString() == report.points(1).SerializeAsString());
        break;
      default: CHECK(h->GetString(health, g) == reflection->GetString(report, f)); break;
    }
  }
  CHECK(shared == 35);
}

TEST_CASE("model_params past 2^50 and a model_flops_per_token not finite, negative or past 1e18 are refused") {
  v1::WorkerReport r = plausible();
  r.set_model_params(dtrain::agent::kMaxReportedParams);
  CHECK(check_report_values(r).ok());
  r.set_model_params(UINT64_MAX);   // a -1 sent as unsigned
  CHECK(check_report_values(r).message() ==
        "model_params 18446744073709551615 is over 1125899906842624 (2^50, hundreds of times the largest model); "
        "not a value this field can have");
  r = plausible();
  r.set_model_flops_per_token(1e18);
  CHECK(check_report_values(r).ok());
  for (double hostile : {1e19, -6.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    CAPTURE(hostile);
    r.set_model_flops_per_token(hostile);
    check_refused(r, "model_flops_per_token");
    CHECK(check_report_values(r).message().find("it must be a finite number, 0 or more, at most 1e+18") !=
          std::string::npos);
  }
}

TEST_CASE("a device name is never refused: health_of cuts it as it cuts a phase") {
  v1::WorkerReport r = plausible();
  r.set_device_name(std::string(1000, 'x') + "\xFF");
  CHECK(check_report_values(r).ok());
  CHECK(health_of(r).report().device_name() == std::string(128, 'x'));
  CHECK(device_name_of("NVIDIA H200") == "NVIDIA H200");
  CHECK(device_name_of("NVIDIA\xC3") == "NVIDIA");
}

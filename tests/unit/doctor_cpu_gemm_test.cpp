// The doctor's cpu.gemm check (agent/node/doctor/cpu_gemm_check.h): what each way of having, or not having, the
// node's GEMM rate shows, and a measurement by a program that is not there or prints nonsense is a clear error.

#include <doctest/doctest.h>

#include <string>

#include "agent/node/doctor/cpu_gemm_check.h"

namespace doctor_cpu_gemm_test {

using dtrain::StatusCode;
using dtrain::node::CpuGemmRate;
using dtrain::node::doctor::cpu_gemm_finding;
using dtrain::node::doctor::DoctorInputs;
using dtrain::node::doctor::measure_cpu_gemm;
using Verdict = dtrain::node::doctor::Status;

DoctorInputs with_rate(bool measured) {
  DoctorInputs in;
  in.cpu_gemm.measured = measured;
  in.cpu_gemm.rate = CpuGemmRate{4.56e10, 2, "AMD EPYC 7B13", 512, 1};
  in.cpu_gemm.cache_path = "/s/cpu_gemm.json";
  return in;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("a measured and cached rate passes and says where it is kept") {
  const auto f = cpu_gemm_finding(with_rate(true));
  CHECK(f.status == Verdict::pass);
  CHECK(f.message == "fp32 GEMM 45.6 GFLOP/s on 2 threads (AMD EPYC 7B13), cached in /s/cpu_gemm.json: the peak "
                     "of CPU ranks' MFU");
  CHECK(cpu_gemm_finding(with_rate(false)).status == Verdict::pass);
}

TEST_CASE("a rate that could not be cached warns with the fix") {
  DoctorInputs in = with_rate(true);
  in.cpu_gemm.outcome = {StatusCode::internal, "cannot create /s: Permission denied"};
  const auto f = cpu_gemm_finding(in);
  CHECK(f.status == Verdict::warn);
  CHECK(has(f.message, "not cached: cannot create /s"));
  CHECK(has(f.fix, "XDG_STATE_HOME"));
}

TEST_CASE("no cache skips (an agent's probe), a stale or corrupt one warns, a failed measurement warns") {
  DoctorInputs in;
  in.cpu_gemm.outcome = {StatusCode::not_found, "no measured GEMM rate of this node (x does not exist)"};
  CHECK(cpu_gemm_finding(in).status == Verdict::skip);
  CHECK(cpu_gemm_finding(DoctorInputs{}).status == Verdict::skip);
  CHECK(has(cpu_gemm_finding(DoctorInputs{}).message, "dtrain doctor"));
  in.cpu_gemm.outcome = {StatusCode::failed_precondition, "the GEMM rate in x was measured on another CPU"};
  CHECK(cpu_gemm_finding(in).status == Verdict::warn);
  CHECK(has(cpu_gemm_finding(in).fix, "dtrain doctor"));
  in.cpu_gemm.measured = true;
  in.cpu_gemm.outcome = {StatusCode::unavailable, "cannot run /opt/dtrain-trainer: No such file or directory"};
  const auto f = cpu_gemm_finding(in);
  CHECK(f.status == Verdict::warn);
  CHECK(has(f.message, "could not measure"));
  CHECK(has(f.fix, "dtrain-trainer"));
}

TEST_CASE("measuring with a missing program, a failing one or one that prints no rate is an error, not a crash") {
  const auto missing = measure_cpu_gemm("/nonexistent/dtrain-trainer", 1, std::chrono::seconds(5));
  CHECK(missing.status.code() == StatusCode::unavailable);
  CHECK(has(missing.status.message(), "/nonexistent/dtrain-trainer"));
  const auto failing = measure_cpu_gemm("/bin/false", 1, std::chrono::seconds(5));
  CHECK(failing.status.code() == StatusCode::unavailable);
  CHECK(has(failing.status.message(), "exited with code 1"));
  const auto silent = measure_cpu_gemm("/bin/true", 1, std::chrono::seconds(5));
  CHECK(silent.status.code() == StatusCode::invalid_argument);
}

}  // namespace doctor_cpu_gemm_test

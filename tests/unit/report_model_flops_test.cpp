// The report page's model FLOP/s and MFU: read from the run's status.json (the launcher's last snapshot) and shown
// in the page's summary; absent from the page when the run has none.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/report/model/run_model.h"
#include "cli/report/page.h"

namespace report_model_flops_test {

namespace fs = std::filesystem;
using namespace dtrain::report;

// A run directory holding an event log and `status` as its status.json.
fs::path run_dir(const std::string& status) {
  const fs::path dir = fs::temp_directory_path() / ("report-mfu-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "events.jsonl") << R"({"ts":1000,"event":"job_start","job":"j-1","name":"j","command":["a"]})"
                                      << "\n" << R"({"ts":3000,"event":"job_end","outcome":"succeeded","exit_code":0})"
                                      << "\n";
  std::ofstream(dir / "status.json") << status;
  return dir;
}

TEST_CASE("status.json's job model FLOP/s and MFU reach the page's summary") {
  const fs::path dir = run_dir(R"({"job":"j-1","ranks":[],"nodes":[],"model_flops_per_s":3.440406528e14,)"
                               R"("mfu":0.34787,"flops_basis":"exact",)"
                               R"("peak_basis":"dense bf16/fp16 peak of h100-sxm"})");
  const auto run = read_run(dir.string());
  fs::remove_all(dir);
  REQUIRE(run.ok());
  const ModelFlopsInfo& flops = run.value.model_flops;
  CHECK(flops.flops_per_s == doctest::Approx(3.440406528e14));
  CHECK(flops.mfu == doctest::Approx(0.34787));
  CHECK(flops.flops_basis == "exact");
  const std::string page = render_page(run.value);
  CHECK(page.find("<td>model FLOP/s</td><td>344 TFLOP/s (exact), <span id=\"mfu\">MFU 34.8%</span> of the dense "
                  "bf16/fp16 peak of h100-sxm (the ranks' last reported rates)</td>") != std::string::npos);
}

TEST_CASE("a run whose FLOP/s are known and its MFU not says so; a run with neither has no row") {
  RunModel model;
  model.job_id = "cpu-run";
  model.model_flops = {2.5e9, std::nullopt, "6N estimate", ""};
  const std::string page = render_page(model);
  CHECK(page.find("2.5 TFLOP/s") == std::string::npos);
  CHECK(page.find("0.0025 TFLOP/s (6N estimate), MFU not known (no peak for the ranks' device)") !=
        std::string::npos);
  model.model_flops = {};
  CHECK(render_page(model).find("model FLOP/s") == std::string::npos);

  // status.json of a run whose ranks never reported a model: nulls, so nothing.
  const fs::path dir = run_dir(R"({"job":"j-1","model_flops_per_s":null,"mfu":null,"flops_basis":7})");
  const auto run = read_run(dir.string());
  fs::remove_all(dir);
  REQUIRE(run.ok());
  CHECK_FALSE(run.value.model_flops.flops_per_s);
  CHECK_FALSE(run.value.model_flops.mfu);
  CHECK(run.value.model_flops.flops_basis.empty());
}

}  // namespace report_model_flops_test

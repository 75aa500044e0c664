// Model FLOP/s and MFU where the launcher shows them: a rank's row of the snapshot (status.json, `dtrain status
// --json`), the job's totals, the text of `dtrain status`, and /metrics.

#include <doctest/doctest.h>

#include <string>

#include "cli/controller/diagnose/diagnosis.h"
#include "cli/controller/observe/job_metrics.h"
#include "cli/controller/observe/job_status.h"
#include "cli/controller/observe/prometheus_text.h"
#include "cli/controller/observe/status_view.h"

namespace controller_model_flops_test {

using namespace dtrain::controller;

dtrain::spec::Plan three_ranks() {
  dtrain::spec::Plan plan;
  for (unsigned rank = 0; rank < 3; ++rank) {
    dtrain::spec::WorkerPlan w;
    w.rank = rank;
    w.node_rank = 0;
    w.host = "gpu-node";
    plan.workers.push_back(w);
  }
  return plan;
}

// Rank 0: dtrain-trainer's exact count on an H100 SXM; rank 1: a script's 6N on an A100; rank 2 reports no model.
JobStatus reporting_job() {
  JobStatus status("mfu-job");
  status.round_started(0, three_ranks());
  WorkerHealth exact;
  exact.rank = 0;
  exact.step = 10;
  exact.tokens_per_s = 400'000;
  exact.model_params = 124'475'904;
  exact.model_flops_per_token = 860'101'632;   // 6N + 12 x 12 x 768 x 1024
  exact.device_name = "NVIDIA H100 80GB HBM3";
  status.reported(exact, 1000);
  WorkerHealth estimate;
  estimate.rank = 1;
  estimate.step = 10;
  estimate.tokens_per_s = 52'000;
  estimate.model_params = 1'000'000'000;
  estimate.model_flops_per_token = 6e9;
  estimate.device_name = "NVIDIA A100-SXM4-80GB";
  status.reported(estimate, 1000);
  WorkerHealth unknown;
  unknown.rank = 2;
  unknown.step = 10;
  unknown.tokens_per_s = 1000;
  status.reported(unknown, 1000);
  return status;
}

TEST_CASE("a rank's row carries its model, FLOP/s, peak and MFU, null where not known; the job's are summed") {
  Diagnoser diagnoser(1.5);
  const auto s = reporting_job().snapshot("running", diagnoser, 2000);
  const auto& exact = s["ranks"][0];
  CHECK(exact["model_params"] == 124'475'904);
  CHECK(exact["model_flops_per_token"] == 860'101'632.0);
  CHECK(exact["flops_basis"] == "exact");
  CHECK(exact["device_name"] == "NVIDIA H100 80GB HBM3");
  // 860,101,632 x 400,000 = 3.440406528e14 FLOP/s; / 989e12 = 0.34787...
  CHECK(exact["model_flops_per_s"].get<double>() == doctest::Approx(3.440406528e14));
  CHECK(exact["peak_flops_per_s"].get<double>() == doctest::Approx(989e12));
  CHECK(exact["peak_basis"] == "dense bf16/fp16 peak of h100-sxm");
  CHECK(exact["mfu"].get<double>() == doctest::Approx(3.440406528e14 / 989e12));
  const auto& estimate = s["ranks"][1];
  CHECK(estimate["flops_basis"] == "6N estimate");
  // 6e9 x 52,000 = 3.12e14 FLOP/s: exactly the A100's 312e12, MFU 1.
  CHECK(estimate["mfu"].get<double>() == doctest::Approx(1.0));
  const auto& unknown = s["ranks"][2];
  for (const char* key : {"model_params", "model_flops_per_token", "flops_basis", "device_name", "model_flops_per_s",
                          "peak_flops_per_s", "peak_basis", "mfu"}) {
    CAPTURE(key);
    CHECK(unknown[key].is_null());
  }
  CHECK(s["model_flops_per_s"].get<double>() == doctest::Approx(3.440406528e14 + 3.12e14));
  CHECK(s["mfu"].get<double>() == doctest::Approx((3.440406528e14 + 3.12e14) / (989e12 + 312e12)));
  CHECK(s["flops_basis"] == "mixed");
  CHECK(s["peak_basis"] == "mixed");
}

TEST_CASE("before any rank reports its model the job's model FLOP/s and MFU are null") {
  JobStatus status("fresh");
  status.round_started(0, three_ranks());
  Diagnoser diagnoser(1.5);
  const auto s = status.snapshot("running", diagnoser, 0);
  CHECK(s["model_flops_per_s"].is_null());
  CHECK(s["mfu"].is_null());
  CHECK(s["ranks"][0]["mfu"].is_null());
  CHECK(render_status(s, "", {}).find("model:") == std::string::npos);
}

TEST_CASE("dtrain status prints the job's model FLOP/s and MFU and each rank's MFU, a dash when not known") {
  Diagnoser diagnoser(1.5);
  const std::string text = render_status(reporting_job().snapshot("running", diagnoser, 2000), "", {});
  CAPTURE(text);
  CHECK(text.find("model: 656 TFLOP/s (mixed), MFU 50.4% of the mixed\n") != std::string::npos);
  CHECK(text.find(" mfu% ") != std::string::npos);
  CHECK(text.find(" 34.8 ") != std::string::npos);    // rank 0
  CHECK(text.find(" 100.0 ") != std::string::npos);   // rank 1

  JobStatus one("one");
  one.round_started(0, three_ranks());
  WorkerHealth h;
  h.rank = 0;
  h.tokens_per_s = 400'000;
  h.model_params = 124'475'904;
  h.model_flops_per_token = 860'101'632;
  h.device_name = "NVIDIA H100 80GB HBM3";
  one.reported(h, 1);
  const std::string single = render_status(one.snapshot("running", diagnoser, 2), "", {});
  CHECK(single.find("model: 344 TFLOP/s (exact), MFU 34.8% of the dense bf16/fp16 peak of h100-sxm\n") !=
        std::string::npos);
}

TEST_CASE("/metrics has the model FLOP/s and MFU gauges of the ranks that know them, and only theirs") {
  Diagnoser diagnoser(1.5);
  const std::string text = format_prometheus(job_metrics(reporting_job().snapshot("running", diagnoser, 2000)));
  CAPTURE(text);
  CHECK(text.find("# TYPE dtrain_worker_model_flops_per_second gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE dtrain_worker_mfu gauge\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_model_flops_per_second{job=\"mfu-job\",rank=\"0\",node=\"0\"} 344040652800000\n") !=
        std::string::npos);
  CHECK(text.find("dtrain_worker_mfu{job=\"mfu-job\",rank=\"1\",node=\"0\"} 1\n") != std::string::npos);
  CHECK(text.find("dtrain_worker_mfu{job=\"mfu-job\",rank=\"2\"") == std::string::npos);
  CHECK(text.find("dtrain_worker_model_flops_per_second{job=\"mfu-job\",rank=\"2\"") == std::string::npos);
}

}  // namespace controller_model_flops_test

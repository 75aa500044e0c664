// `dtrain plan --gpu NAME` (cli/plan/costs/gpus.h): a preset gives the cluster its memory, compute rate and bandwidths,
// every flag overrides the preset's value, an unknown name is refused with the known ones, and with only --model,
// --gpus and --gpu the plan gives times.

#include <doctest/doctest.h>

#include <string>

#include "cli/plan/costs/gpus.h"
#include "cli/plan/recommend.h"
#include "cli/plan/request.h"

#pragma GCC diagnostic push   // GCC 12's optional<string> false positive, as in plan_advisor_test.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace plan_gpus_test {

using dtrain::plan::PlanArgs;
using dtrain::plan::PlanRequest;

PlanRequest request(const PlanArgs& args) {
  const auto r = dtrain::plan::make_request(args);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  return r.value;
}

PlanArgs on(const std::string& gpu) {
  PlanArgs a;
  a.model = "llama2-70b";
  a.gpus = 64;
  a.gpu = gpu;
  return a;
}

TEST_CASE("a preset gives memory, the compute rate (half the dense peak) and the system's bandwidths") {
  const PlanRequest h100 = request(on("h100-sxm"));
  CHECK(h100.cluster.gpu == "h100-sxm");
  CHECK(h100.cluster.gpu_memory == 80e9);
  CHECK(*h100.cluster.peak_flops == 989e12);
  CHECK(*h100.cluster.gpu_flops == 989e12 * dtrain::plan::kAchievedShareOfPeak);
  CHECK(*h100.cluster.intra_node_bw == 450e9);
  CHECK(*h100.cluster.inter_node_bw == 50e9);
  CHECK(h100.cluster.gpus_per_node == 8);
  CHECK(*h100.cluster.memory_bw == 3350e9);
  CHECK(request(on("h200")).cluster.gpu_memory == 141e9);
  CHECK(request(on("a100-40gb")).cluster.gpu_memory == 40e9);
  CHECK_FALSE(request(on("l40s")).cluster.inter_node_bw.has_value());  // no standard network: the user's to give
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s"}) {
    CAPTURE(name);
    const auto* gpu = dtrain::plan::find_gpu(name);
    REQUIRE(gpu != nullptr);
    CHECK(gpu->memory > 0);
    CHECK(gpu->peak_flops > 0);
    CHECK(gpu->intra_node_bw > 0);
    CHECK(gpu->memory_bw > 0);
    CHECK(dtrain::plan::gpu_names().find(name) != std::string::npos);
  }
}

TEST_CASE("every flag overrides the preset's value") {
  PlanArgs a = on("h100-sxm");
  a.gpu_memory = "94GB";
  a.gpus_per_node = 4;
  a.intra_node_bw_gbs = 300;
  a.inter_node_bw_gbs = 20;
  a.gpu_tflops = 400;
  a.memory_bw_gbs = 3000;
  const PlanRequest r = request(a);
  CHECK(*r.cluster.memory_bw == 3000e9);
  CHECK(r.cluster.gpu_memory == 94e9);
  CHECK(r.cluster.gpus_per_node == 4);
  CHECK(*r.cluster.intra_node_bw == 300e9);
  CHECK(*r.cluster.inter_node_bw == 20e9);
  CHECK(*r.cluster.gpu_flops == 400e12);
  CHECK(*r.cluster.peak_flops == 989e12);  // the peak stays the GPU's
}

TEST_CASE("an unknown --gpu is refused, naming the known ones; without --gpu nothing changes") {
  const auto r = dtrain::plan::make_request(on("h300"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status.message().find("--gpu h300") != std::string::npos);
  CHECK(r.status.message().find("h100-sxm") != std::string::npos);
  PlanArgs plain = on("a100-80gb");
  plain.gpu.reset();
  const PlanRequest none = request(plain);
  CHECK(none.cluster.gpu.empty());
  CHECK(none.cluster.gpu_memory == 80e9);
  CHECK_FALSE(none.cluster.gpu_flops.has_value());
  CHECK_FALSE(none.cluster.intra_node_bw.has_value());
}

TEST_CASE("with --model, --gpus and --gpu alone the plan gives times") {
  const PlanRequest r = request(on("h100-sxm"));
  const auto report = dtrain::plan::make_report(r);
  REQUIRE(report.recommendation.choice.has_value());
  REQUIRE(report.recommendation.choice->scaling.has_value());
  CHECK(report.recommendation.choice->scaling->compute_s > 0);
  PlanArgs plain = on("h100-sxm");
  plain.gpu.reset();
  const auto without = dtrain::plan::make_report(request(plain));
  REQUIRE(without.recommendation.choice.has_value());
  CHECK_FALSE(without.recommendation.choice->scaling.has_value());
}

}  // namespace plan_gpus_test

#pragma GCC diagnostic pop

// Model FLOP/s and MFU (cli/mfu/): the device table's lookup by torch.cuda.get_device_name, its bf16 peaks being
// `dtrain plan`'s presets, and the arithmetic worked by hand.

#include <doctest/doctest.h>

#include <string>

#include "cli/mfu/device_peaks.h"
#include "cli/mfu/model_flops.h"
#include "cli/plan/costs/gpus.h"

namespace mfu_model_flops_test {

using dtrain::mfu::FlopsBasis;
using dtrain::mfu::JobModelFlops;
using dtrain::mfu::peaks_of_device;
using dtrain::mfu::rank_model_flops;

TEST_CASE("device names as torch gives them map to the plan's presets, with their bf16 peaks and fp32 ones") {
  struct Case {
    const char* device;
    const char* preset;
    double dense_tflops;
    double fp32_tflops;
  };
  const Case cases[] = {
      {"NVIDIA A100-SXM4-80GB", "a100-80gb", 312, 19.5}, {"NVIDIA A100-SXM4-40GB", "a100-40gb", 312, 19.5},
      {"NVIDIA A100 80GB PCIe", "a100-80gb", 312, 19.5}, {"NVIDIA H100 80GB HBM3", "h100-sxm", 989, 67},
      {"NVIDIA H100 PCIe", "h100-pcie", 756, 51},        {"NVIDIA H200", "h200", 989, 67},
      {"NVIDIA B200", "b200", 2250, 75},                 {"NVIDIA L40S", "l40s", 362, 91.6},
  };
  for (const Case& c : cases) {
    CAPTURE(c.device);
    const auto peaks = peaks_of_device(c.device);
    REQUIRE(peaks.has_value());
    CHECK(std::string(peaks->preset) == c.preset);
    CHECK(peaks->dense_half_flops == doctest::Approx(c.dense_tflops * 1e12));
    CHECK(peaks->fp32_flops == doctest::Approx(c.fp32_tflops * 1e12));
    // One copy of the bf16 peak: the plan's preset is where it comes from.
    CHECK(peaks->dense_half_flops == dtrain::plan::find_gpu(c.preset)->peak_flops);
  }
}

TEST_CASE("a name matches whole, whatever its case, spaces or missing maker; others have no peak") {
  CHECK(peaks_of_device("  nvidia h200 ")->preset == std::string("h200"));
  CHECK(peaks_of_device("A100-SXM4-40GB")->preset == std::string("a100-40gb"));   // an older driver's name
  CHECK_FALSE(peaks_of_device("NVIDIA H200 NVL"));   // a lower peak than the SXM part: not guessed
  CHECK_FALSE(peaks_of_device("NVIDIA GeForce RTX 4090"));
  CHECK_FALSE(peaks_of_device("cpu"));
  CHECK_FALSE(peaks_of_device(""));
  CHECK(dtrain::mfu::known_device_names().find("NVIDIA H100 80GB HBM3") != std::string::npos);
}

TEST_CASE("6 x params is the 6N estimate; anything else is the worker's exact count; 0 is not known") {
  CHECK(dtrain::mfu::flops_basis(124'000'000, 744e6) == FlopsBasis::estimate_6n);
  CHECK(dtrain::mfu::flops_basis(124'000'000, 744e6 + 12.0 * 12 * 768 * 1024) == FlopsBasis::exact);
  CHECK(dtrain::mfu::flops_basis(124'000'000, 0) == FlopsBasis::unknown);
  CHECK(dtrain::mfu::flops_basis(0, 1e9) == FlopsBasis::exact);   // a count without a parameter count
  CHECK(std::string(to_string(FlopsBasis::estimate_6n)) == "6N estimate");
  CHECK(std::string(to_string(FlopsBasis::exact)) == "exact");
}

TEST_CASE("a rank's model FLOP/s and MFU, worked by hand") {
  // GPT-2 124M on an H100 SXM: 6N = 6 x 124,475,904 = 746,855,424; 12*L*h*s = 12 x 12 x 768 x 1024 = 113,246,208;
  // 860,101,632 FLOPs per token. At 400,000 tokens/s: 3.440406528e14 FLOP/s, over 989e12: MFU 0.347867...
  const double per_token = 6.0 * 124'475'904 + 12.0 * 12 * 768 * 1024;
  CHECK(per_token == 860'101'632.0);
  const auto r = rank_model_flops(124'475'904, per_token, 400'000, "NVIDIA H100 80GB HBM3");
  CHECK(r.basis == FlopsBasis::exact);
  REQUIRE(r.flops_per_s.has_value());
  CHECK(*r.flops_per_s == doctest::Approx(3.440406528e14));
  REQUIRE(r.mfu.has_value());
  CHECK(*r.mfu == doctest::Approx(3.440406528e14 / 989e12));
  CHECK(*r.mfu == doctest::Approx(0.34787).epsilon(1e-4));
  CHECK(r.peak_basis == "dense bf16/fp16 peak of h100-sxm");
}

TEST_CASE("without tokens/s or a model nothing is known; without a known device the FLOP/s are, the MFU not") {
  CHECK_FALSE(rank_model_flops(1000, 6000, 0, "NVIDIA H200").flops_per_s);
  CHECK_FALSE(rank_model_flops(1000, 0, 50, "NVIDIA H200").flops_per_s);
  const auto cpu = rank_model_flops(1000, 6000, 50, "cpu");
  CHECK(*cpu.flops_per_s == 300000.0);
  CHECK(cpu.basis == FlopsBasis::estimate_6n);
  CHECK_FALSE(cpu.peak_flops);
  CHECK_FALSE(cpu.mfu);
  CHECK(cpu.peak_basis.empty());
}

TEST_CASE("the job's FLOP/s are the ranks' sum, its MFU that over the sum of the peaks of the ranks that have one") {
  JobModelFlops job;
  CHECK_FALSE(job.flops_per_s());
  CHECK_FALSE(job.mfu());
  CHECK(job.flops_basis().empty());
  // Two A100s at 1e12 x 100 = 1e14 and 1e12 x 50 = 5e13 FLOP/s: 1.5e14 over 2 x 312e12 = 0.2403846...
  job.add(rank_model_flops(1'000'000'000, 1e12, 100, "NVIDIA A100-SXM4-80GB"));
  job.add(rank_model_flops(1'000'000'000, 1e12, 50, "NVIDIA A100-SXM4-40GB"));
  CHECK(*job.flops_per_s() == doctest::Approx(1.5e14));
  CHECK(*job.mfu() == doctest::Approx(1.5e14 / 624e12));
  CHECK(job.flops_basis() == "exact");
  CHECK(job.peak_basis() == "mixed");   // two presets
  // A CPU rank adds its FLOP/s to the job's, not to its MFU; its 6N basis makes the job's mixed.
  job.add(rank_model_flops(1000, 6000, 1e6, "cpu"));
  CHECK(*job.flops_per_s() == doctest::Approx(1.5e14 + 6e9));
  CHECK(*job.mfu() == doctest::Approx(1.5e14 / 624e12));
  CHECK(job.flops_basis() == "mixed");
  // A rank that reported nothing of its model changes nothing.
  job.add(rank_model_flops(0, 0, 100, ""));
  CHECK(*job.flops_per_s() == doctest::Approx(1.5e14 + 6e9));
}

}  // namespace mfu_model_flops_test

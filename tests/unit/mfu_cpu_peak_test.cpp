// A CPU rank's MFU (cli/mfu/model_flops.h): its peak is its share of its node's measured fp32 GEMM rate, labelled
// as measured; a GPU keeps its datasheet peak whatever CPU rate is given; no rate, no MFU.

#include <doctest/doctest.h>

#include "cli/mfu/model_flops.h"

namespace mfu_cpu_peak_test {

using dtrain::mfu::cpu_rank_peak;
using dtrain::mfu::CpuGemm;
using dtrain::mfu::JobModelFlops;
using dtrain::mfu::kCpuPeakBasis;
using dtrain::mfu::rank_model_flops;

TEST_CASE("a CPU rank's peak is its threads' share of the node's rate") {
  const CpuGemm node{8e10, 8};
  CHECK(*cpu_rank_peak(node, 8) == doctest::Approx(8e10));
  CHECK(*cpu_rank_peak(node, 4) == doctest::Approx(4e10));
  CHECK(*cpu_rank_peak(node, 1) == doctest::Approx(1e10));
  CHECK(*cpu_rank_peak(node, 0) == doctest::Approx(8e10));    // not known: the whole node
  CHECK(*cpu_rank_peak(node, 16) == doctest::Approx(8e10));   // more threads than measured: the node's rate at most
  CHECK_FALSE(cpu_rank_peak(CpuGemm{}, 4));
  CHECK_FALSE(cpu_rank_peak(CpuGemm{8e10, 0}, 4));
}

TEST_CASE("a CPU rank with a measured peak has an MFU over it, labelled as measured") {
  // 6000 FLOPs a token x 1e6 tokens/s = 6e9 FLOP/s over a 2e10 share: 0.3.
  const auto r = rank_model_flops(1000, 6000, 1e6, "cpu", 2e10);
  REQUIRE(r.mfu);
  CHECK(*r.mfu == doctest::Approx(0.3));
  CHECK(*r.peak_flops == 2e10);
  CHECK(r.peak_basis == kCpuPeakBasis);
  CHECK(r.peak_basis == std::string("measured fp32 GEMM of the node's CPUs"));
  CHECK(rank_model_flops(1000, 6000, 1e6, " CPU ", 2e10).mfu);
  // Without a rate: FLOP/s, no MFU.
  const auto none = rank_model_flops(1000, 6000, 1e6, "cpu", std::nullopt);
  CHECK(none.flops_per_s);
  CHECK_FALSE(none.mfu);
  CHECK(none.peak_basis.empty());
}

TEST_CASE("a GPU rank ignores a CPU rate; an unknown device gets no MFU from one") {
  const auto gpu = rank_model_flops(1000, 6000, 1e6, "NVIDIA H200", 2e10);
  CHECK(gpu.peak_basis == "dense bf16/fp16 peak of h200");
  CHECK_FALSE(rank_model_flops(1000, 6000, 1e6, "Some Accelerator", 2e10).mfu);
}

TEST_CASE("two CPU ranks sharing a node: the job's MFU is over the node's rate") {
  const CpuGemm node{4e10, 2};
  JobModelFlops job;
  job.add(rank_model_flops(1000, 6000, 1e6, "cpu", cpu_rank_peak(node, 1)));
  job.add(rank_model_flops(1000, 6000, 2e6, "cpu", cpu_rank_peak(node, 1)));
  CHECK(*job.mfu() == doctest::Approx(1.8e10 / 4e10));
  CHECK(job.peak_basis() == kCpuPeakBasis);
}

}  // namespace mfu_cpu_peak_test

// `dtrain plan` against published training runs: for each run's model shape, GPUs, global batch and micro-batch,
// on the run's GPU preset, the recommended layout must fit and its predicted TFLOP/s per GPU (hardware FLOPs,
// recomputation counted, as the sources count them) must be within 25% of the published figure.
//
// Sources (one per row below):
//   N21   Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC21,
//         arXiv:2104.04473, Table 1 (A100-80GB, DGX A100 with 8 x 200 Gb/s HDR InfiniBand; s = 2048, V = 51,200;
//         full recomputation; TFLOP/s counting the recomputed forward); TP/PP/micro-batch as in Megatron-LM's
//         examples/academic_paper_scripts/sc21/run_table_1.sh.
//   BLOOM bigscience-workshop/bigscience, train/tr11-176B-ml/README.md and tr11-176B-ml.slurm: 384 A100-80GB,
//         TP 4, PP 12, DP 8, micro-batch 2, global batch 2048, full recomputation, 149.77 TFLOP/s logged (hardware
//         FLOPs).
//   L3    Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783, Tables 3 and 4: 405B (126 layers, 16384
//         hidden, 128 heads, 8 key/value heads, sequence 8192) on 8,192 H100s, TP 8, PP 16, DP 64, global batch
//         2048 sequences, 430 TFLOP/s per GPU (43% BF16 MFU; no activation checkpointing).
//   MH    NVIDIA/Megatron-LM README, H100 weak-scaling table (images/model_table.png, Megatron-Core r0.8.0): GPT 70B
//         (84 layers, 8192 hidden, 64 heads) on 768 H100s, TP 8, PP 2, global batch 384, 419.7 TFLOP/s; GPT 177B
//         (96, 12288, 96) on 2304, TP 8, PP 6, global batch 1152, 432.8 TFLOP/s; sequence 4096.
//
// What is not held here yet: the second criterion, a recommended TP x PP within a factor of 2 of the
// published one. The plan's layouts use the distributed optimizer (ZeRO-1/2/3) with sequence parallelism and
// selective recomputation, which those runs (2021 Megatron-LM without a distributed optimizer; BLOOM before sequence
// parallelism) could not, so it needs less pipelining to fit; for the largest runs it predicts fewer stages than
// they used (README "dtrain plan": the comparison table).

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "cli/plan/recommend.h"
#include "cli/plan/request.h"

#pragma GCC diagnostic push   // GCC 12's optional<string> false positive, as in plan_advisor_test.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace plan_published_test {

struct Run {
  const char* name;
  const char* source;
  double params;
  int layers, hidden, heads, kv_heads, seq_len;
  int gpus;
  long long global_batch;
  int micro_batch;
  const char* gpu;
  int tp, pp;          // published
  double tflops;       // published, per GPU
};

const Run kRuns[] = {
    {"GPT 1.7B", "N21", 1.7e9, 24, 2304, 24, 0, 2048, 32, 512, 16, "a100-80gb", 1, 1, 137},
    {"GPT 3.6B", "N21", 3.6e9, 30, 3072, 32, 0, 2048, 64, 512, 16, "a100-80gb", 2, 1, 138},
    {"GPT 7.5B", "N21", 7.5e9, 36, 4096, 32, 0, 2048, 128, 512, 16, "a100-80gb", 4, 1, 142},
    {"GPT 18.4B", "N21", 18.4e9, 40, 6144, 48, 0, 2048, 256, 1024, 8, "a100-80gb", 8, 1, 135},
    {"GPT 39.1B", "N21", 39.1e9, 48, 8192, 64, 0, 2048, 512, 1536, 4, "a100-80gb", 8, 2, 138},
    {"GPT 76.1B", "N21", 76.1e9, 60, 10240, 80, 0, 2048, 1024, 1792, 2, "a100-80gb", 8, 4, 140},
    {"GPT 145.6B", "N21", 145.6e9, 80, 12288, 96, 0, 2048, 1536, 2304, 2, "a100-80gb", 8, 8, 148},
    {"GPT 310.1B", "N21", 310.1e9, 96, 16384, 128, 0, 2048, 1920, 2160, 1, "a100-80gb", 8, 16, 155},
    {"GPT 529.6B", "N21", 529.6e9, 105, 20480, 128, 0, 2048, 2520, 2520, 1, "a100-80gb", 8, 35, 163},
    {"GPT 1008B", "N21", 1008e9, 128, 25600, 160, 0, 2048, 3072, 3072, 1, "a100-80gb", 8, 64, 163},
    {"BLOOM 176B", "BLOOM", 176e9, 70, 14336, 112, 0, 2048, 384, 2048, 2, "a100-80gb", 4, 12, 149.77},
    {"Llama 3 405B", "L3", 405e9, 126, 16384, 128, 8, 8192, 8192, 2048, 1, "h100-sxm", 8, 16, 430},
    {"GPT 70B (H100)", "MH", 70e9, 84, 8192, 64, 0, 4096, 768, 384, 1, "h100-sxm", 8, 2, 419.7},
    {"GPT 177B (H100)", "MH", 177e9, 96, 12288, 96, 0, 4096, 2304, 1152, 1, "h100-sxm", 8, 6, 432.8},
};

dtrain::plan::PlanReport plan_for(const Run& run) {
  dtrain::plan::PlanArgs a;
  a.params = run.params;
  a.layers = run.layers;
  a.hidden = run.hidden;
  a.heads = run.heads;
  a.seq_len = run.seq_len;
  a.gpus = run.gpus;
  a.global_batch = run.global_batch;
  a.micro_batch = run.micro_batch;
  a.gpu = run.gpu;
  auto request = dtrain::plan::make_request(a);
  REQUIRE_MESSAGE(request.ok(), request.status.message());
  if (run.kv_heads) request.value.workload.shape->kv_heads = run.kv_heads;
  return dtrain::plan::make_report(request.value);
}

TEST_CASE("published runs: the recommendation fits and predicts TFLOP/s per GPU within 25%") {
  for (const Run& run : kRuns) {
    CAPTURE(run.name);
    CAPTURE(run.source);
    const auto report = plan_for(run);
    REQUIRE(report.recommendation.choice.has_value());
    const auto& choice = *report.recommendation.choice;
    CHECK(choice.fits);
    REQUIRE(choice.scaling.has_value());
    const double predicted = choice.scaling->tflops_per_gpu;
    CAPTURE(predicted);
    CAPTURE(choice.layout.tp * choice.layout.pp);
    CHECK(std::abs(predicted / run.tflops - 1) <= 0.25);
  }
}

TEST_CASE("published runs: every published layout itself fits in the plan's memory model") {
  // The plan's accounting must not call a layout that trained impossible: each run's own TP and PP, at ZeRO-1
  // (the distributed optimizer; BLOOM's BF16Optimizer shards the same state) with full recomputation, fits.
  for (const Run& run : kRuns) {
    CAPTURE(run.name);
    auto request = plan_for(run).request;
    const dtrain::plan::Layout published{1, run.tp, run.pp, dtrain::plan::Recompute::full, run.tp > 1};
    const auto e = dtrain::plan::evaluate(request, published);
    CAPTURE(e.total);
    CHECK(e.fits);
  }
}

}  // namespace plan_published_test

#pragma GCC diagnostic pop

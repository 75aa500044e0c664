// The latencies `dtrain plan` charges each collective and each pipeline send (cli/plan/costs/formulas.h): the
// collectives a tensor-parallel stage starts per micro-batch (the cross-entropy's small ones too), the pipeline's sends
// at NCCL's one-step latency, and --collective-latency-us, a latency measured on the job's ranks, in place of NCCL's
// model. Each expected value is worked out in its comment.

#include <doctest/doctest.h>

#include <string>

#include "cli/plan/advisor.h"
#include "cli/plan/recommend.h"
#include "cli/plan/render.h"
#include "cli/plan/request.h"
#include "tests/unit/contains.h"

#pragma GCC diagnostic push   // GCC 12's optional<string> false positive, as in plan_advisor_test.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace plan_latency_test {

using namespace dtrain::plan;

// scripts/bench/plan_vs_measured.py's model: L=4, C=256, NH=4, T=256, V=256, global batch 8, fp32, on 2 CPU ranks.
PlanArgs bench_model(int tp, int pp, int micro_batch) {
  PlanArgs a;
  a.layers = 4;
  a.hidden = 256;
  a.heads = 4;
  a.seq_len = 256;
  a.vocab = 256;
  a.gpus = 2;
  a.gpus_per_node = 2;
  a.tp = tp;
  a.pp = pp;
  a.zero = 0;
  a.recompute = "none";
  a.sequence_parallel = "off";
  a.attention = "eager";
  a.precision = "fp32";
  a.micro_batch = micro_batch;
  a.global_batch = 8;
  a.gpu_tflops = 0.09;
  a.intra_node_bw_gbs = 1.2;
  return a;
}

Evaluation evaluate_first(const PlanArgs& args) {
  const auto r = make_request(args);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  return make_report(r.value).strategies.at(0);
}

TEST_CASE("tensor-parallel collectives per micro-batch: the layers', the embedding's, the head's and the loss's") {
  // One stage of 4 layers: 4 a layer, the embedding's and the head's allreduce, the cross-entropy's all-gather and
  // allreduce: 16 + 2 + 2.
  CHECK(tensor_parallel_collectives(4, 1) == 20);
  CHECK(tensor_parallel_collectives(4, 1, Recompute::full) == 6 * 4 + 4);  // the recomputed forward's 2 a layer
  // Two stages of 2 layers: the first 8 + the embedding's = 9, the last 8 + the head's + the loss's 2 = 11.
  CHECK(tensor_parallel_collectives(4, 2) == 11);
  // 5 layers in 2 stages: 3 on the first (12 + 1 = 13), 2 on the last (8 + 3 = 11).
  CHECK(tensor_parallel_collectives(5, 2) == 13);
  // The bytes still count the s*b*h allreduces only (the loss's are 1/h of them).
  CHECK(tensor_parallel_allreduces(4, 1) == 18);
}

TEST_CASE("pipeline sends: 2 a micro-batch, v times interleaved, each at NCCL's one-step latency by default") {
  CHECK(pipeline_sends(1, 8) == 0);
  CHECK(pipeline_sends(2, 8) == 16);
  CHECK(pipeline_sends(4, 8, 2) == 32);
  // A ring of two ranks' one step: 8.4 + 3.4 us within a node; across two, PAT's 8 + 1 x 4 + 2 x 2.8 = 17.6 us.
  CHECK(send_latency_seconds(1) == doctest::Approx(11.8e-6));
  CHECK(send_latency_seconds(2) == doctest::Approx(17.6e-6));
  // PP=2 with m=8 on one node: 16 sends of 11.8 us, and the tied embedding's sum, a ring allreduce over 2 ranks
  // (8.4 + 2 x 3.4 = 15.2 us, below the tree's 16.4).
  const Evaluation e = evaluate_first(bench_model(1, 2, 1));
  CHECK(e.comm.latency_s == doctest::Approx(16 * 11.8e-6 + 15.2e-6));
}

TEST_CASE("--collective-latency-us: every collective and send waits the measured latency instead of NCCL's") {
  // TP=2, b=8, one micro-batch: 20 collectives of 2 ms; no data parallelism, no pipeline.
  PlanArgs tp = bench_model(2, 1, 8);
  tp.collective_latency_us = 2000;
  const Evaluation t = evaluate_first(tp);
  CHECK(t.comm.latency_s == doctest::Approx(20 * 2e-3));
  // The bytes are unchanged: 18 allreduces of 8 x 256 x 256 fp32 (2 MiB), a ring over 2 ranks sends each once.
  const double bytes = 18 * 8.0 * 256 * 256 * 4;
  CHECK(t.comm.tensor_parallel == doctest::Approx(bytes));
  CHECK(*t.comm.tensor_parallel_seconds == doctest::Approx(bytes / 1.2e9 + 20 * 2e-3));
  REQUIRE(t.scaling.has_value());
  CHECK(t.scaling->tensor_parallel_s == doctest::Approx(*t.comm.tensor_parallel_seconds));
  // PP=2, m=8: 16 sends and the tied embedding's sum, 17 latencies.
  PlanArgs pp = bench_model(1, 2, 1);
  pp.collective_latency_us = 2000;
  const Evaluation p = evaluate_first(pp);
  CHECK(p.comm.latency_s == doctest::Approx(17 * 2e-3));
  REQUIRE(p.scaling.has_value());
  CHECK(p.scaling->pipeline_s == doctest::Approx(*p.comm.pipeline_seconds));
  // DDP on 2 ranks: one bucket of Megatron's size (3.3M parameters < 40M), one allreduce's latency.
  PlanArgs ddp = bench_model(1, 1, 4);
  ddp.collective_latency_us = 2000;
  CHECK(evaluate_first(ddp).comm.latency_s == doctest::Approx(2e-3));
  // Without the flag the same TP layout waits NCCL's: a ring allreduce over 2 ranks, 15.2 us each.
  CHECK(evaluate_first(bench_model(2, 1, 8)).comm.latency_s == doctest::Approx(20 * 15.2e-6));
}

TEST_CASE("--collective-latency-us: shown in the request, refused when not a positive time") {
  PlanArgs a = bench_model(2, 1, 8);
  a.collective_latency_us = 1500;
  const auto r = make_request(a);
  REQUIRE(r.ok());
  CHECK(*r.value.cluster.collective_latency == doctest::Approx(1.5e-3));
  const PlanReport report = make_report(r.value);
  CHECK(contains(render_json(report), "\"collective_latency_s\": 0.0015"));
  CHECK(contains(render_text(report), "latency: 1500 us a collective or send, as measured"));
  CHECK(contains(render_json(make_report(make_request(bench_model(2, 1, 8)).value)), "\"collective_latency_s\": null"));
  for (double bad : {0.0, -5.0, 2e9}) {
    a.collective_latency_us = bad;
    const auto refused = make_request(a);
    REQUIRE_FALSE(refused.ok());
    CHECK(contains(refused.status.message(), "--collective-latency-us"));
  }
}

}  // namespace plan_latency_test

#pragma GCC diagnostic pop

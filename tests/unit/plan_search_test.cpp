// What limits `dtrain plan`'s search: --framework, --zero, --recompute, --sequence-parallel, --attention and the
// micro-batch (cli/plan/request.h, advisor.h runs_on), and their refusals.

#include <doctest/doctest.h>

#include <set>
#include <string>

#include "cli/plan/advisor.h"
#include "cli/plan/recommend.h"
#include "cli/plan/render.h"
#include "cli/plan/request.h"
#include "tests/unit/contains.h"

#pragma GCC diagnostic push   // GCC 12's optional<string> false positive, as in plan_advisor_test.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace plan_search_test {

using namespace dtrain::plan;

// A 39B GPT (Narayanan et al. SC21 Table 1's shape) on 512 A100s with its global batch.
PlanArgs gpt39b() {
  PlanArgs a;
  a.params = 39.1e9;
  a.layers = 48;
  a.hidden = 8192;
  a.heads = 64;
  a.seq_len = 2048;
  a.gpus = 512;
  a.global_batch = 1536;
  a.gpu = "a100-80gb";
  return a;
}

PlanReport report_for(const PlanArgs& a) {
  const auto r = make_request(a);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  return make_report(r.value);
}

std::string refusal(const PlanArgs& a) {
  const auto r = make_request(a);
  CHECK_FALSE(r.ok());
  return r.status.message();
}

template <class F>
void for_every_layout(const PlanReport& report, F check) {
  for (const Evaluation& e : report.strategies) check(e);
  for (const Evaluation& e : report.search) check(e);
}

TEST_CASE("--framework megatron: ZeRO 0 or 1 only, at Megatron's bytes per parameter") {
  PlanArgs a = gpt39b();
  a.framework = "megatron";
  const PlanReport report = report_for(a);
  CHECK_FALSE(report.search.empty());
  std::set<int> stages;
  for_every_layout(report, [&](const Evaluation& e) { stages.insert(e.layout.stage); });
  CHECK(stages == std::set<int>{0, 1});
  // DDP at TP 8 x PP 2 in bf16: 18 bytes for each of 39.1e9 / 16 parameters (no vocabulary given: P / (t*p)).
  const Evaluation e = evaluate(report.request, Layout{0, 8, 2, Recompute::full, true});
  CHECK(e.states.total() == doctest::Approx(18 * 39.1e9 / 16));
  const Evaluation any = evaluate(report_for(gpt39b()).request, Layout{0, 8, 2, Recompute::full, true});
  CHECK(any.states.total() == doctest::Approx(16 * 39.1e9 / 16));
  a.zero = 3;
  CHECK(contains(refusal(a), "--zero 3 with --framework megatron"));
}

TEST_CASE("--framework deepspeed: no tensor parallelism, no interleaving, no selective recomputation") {
  PlanArgs a = gpt39b();
  a.framework = "deepspeed";
  const PlanReport report = report_for(a);
  bool any_pipeline = false;
  for_every_layout(report, [&](const Evaluation& e) {
    CHECK(e.layout.tp == 1);
    CHECK(e.layout.virtual_stages == 1);
    CHECK(e.layout.recompute != Recompute::selective);
    if (e.layout.pp > 1) CHECK(e.layout.stage <= 1);
    any_pipeline = any_pipeline || e.layout.pp > 1;
  });
  CHECK(any_pipeline);
  a.tp = 2;
  CHECK(contains(refusal(a), "--tp with --framework deepspeed"));
  a.tp.reset();
  a.recompute = "selective";
  CHECK(contains(refusal(a), "DeepSpeed checkpoints whole layers"));
}

TEST_CASE("--zero, --recompute and --sequence-parallel fix what they name; the rest is still searched") {
  PlanArgs a = gpt39b();
  a.zero = 0;
  a.recompute = "full";
  a.sequence_parallel = "off";
  const PlanReport report = report_for(a);
  std::set<int> tps;
  for_every_layout(report, [&](const Evaluation& e) {
    CHECK(e.layout.stage == 0);
    CHECK(e.layout.recompute == Recompute::full);
    CHECK_FALSE(e.layout.sequence_parallel);
    tps.insert(e.layout.tp);
  });
  CHECK(tps.size() > 1);
  REQUIRE(report.recommendation.choice.has_value());
  CHECK(report.recommendation.choice->layout.stage == 0);
  a.zero = 4;
  CHECK(contains(refusal(a), "--zero 4: use 0, 1, 2 or 3"));
  a.zero = 2;
  a.pp = 2;
  CHECK(contains(refusal(a), "--zero 2 with --pp"));
  a = gpt39b();
  a.recompute = "some";
  CHECK(contains(refusal(a), "--recompute some: use none, selective or full"));
  a.recompute = "";
  a.sequence_parallel = "maybe";
  CHECK(contains(refusal(a), "--sequence-parallel maybe: use on or off"));
  a.sequence_parallel = "on";
  a.attention = "sparse";
  CHECK(contains(refusal(a), "--attention sparse: use flash"));
  a.attention = "flash";
  a.framework = "jax";
  CHECK(contains(refusal(a), "--framework jax: use any, megatron or deepspeed"));
}

TEST_CASE("micro-batch: searched over 1, 2, 4, 8 where the global batch allows, fixed when given") {
  PlanArgs a = gpt39b();
  std::set<int> tried;
  for_every_layout(report_for(a), [&](const Evaluation& e) { tried.insert(e.layout.micro_batch); });
  CHECK(tried == std::set<int>{1, 2, 4, 8});
  a.micro_batch = 2;
  tried.clear();
  const PlanReport fixed = report_for(a);
  for_every_layout(fixed, [&](const Evaluation& e) { tried.insert(e.layout.micro_batch); });
  CHECK(tried == std::set<int>{2});
  // The choice's micro-batch reaches its accumulation and the JSON.
  const Evaluation& c = *fixed.recommendation.choice;
  CHECK(c.accumulation.global_batch == 1536);
  CHECK(c.accumulation.micro_steps * 2 * c.dp == 1536);
  CHECK(contains(render_json(fixed), "\"micro_batch\": 2"));
  // 1536 over 512 data-parallel ranks at b = 8 would be 4,096 sequences: not tried for DDP alone.
  a.micro_batch.reset();
  for_every_layout(report_for(a), [&](const Evaluation& e) {
    if (e.layout.tp * e.layout.pp == 1) CHECK(e.layout.micro_batch == 1);
  });
}

TEST_CASE("--vocab with --params: the embedding on the end stages; --kv-heads must divide the heads") {
  PlanArgs a = gpt39b();
  a.vocab = 51200;
  a.pp = 4;
  a.tp = 8;
  const PlanReport report = report_for(a);
  CHECK_FALSE(report.request.workload.trainer.has_value());  // not dtrain-trainer's model: --params gives the size
  // 12 layers of (39.1e9 - 51,200 * 8,192) / 48 and the embedding, over t = 8, at 16 bytes (DDP).
  const double layer = (39.1e9 - 51200.0 * 8192) / 48;
  CHECK(report.strategies[0].states.total() == doctest::Approx(16 * (12 * layer + 51200.0 * 8192) / 8));
  a.kv_heads = 6;
  CHECK(contains(refusal(a), "--kv-heads 6 must divide --heads 64"));
  a.kv_heads = 8;
  CHECK(report_for(a).request.workload.shape->kv_heads == 8);
  a.ffn = 28672;
  a.mlp = "swiglu";
  const auto shape = *report_for(a).request.workload.shape;
  CHECK(shape.ffn == 28672);
  CHECK(shape.gated_mlp);
  a.mlp = "relu";
  CHECK(contains(refusal(a), "--mlp relu: use gelu"));
  PlanArgs preset;
  preset.model = "llama3-8b";
  preset.gpus = 8;
  CHECK(report_for(preset).request.workload.shape->gated_mlp);  // the preset's own MLP
  preset.ffn = 1000;
  CHECK(contains(refusal(preset), "already gives the shape"));
  PlanArgs no_shape;
  no_shape.params = 1e9;
  no_shape.gpus = 8;
  no_shape.vocab = 50000;
  CHECK(contains(refusal(no_shape), "--vocab with --params places the embedding"));
}

TEST_CASE("the optimizer step: at the GPU's memory bandwidth, part of the step; ZeRO-1 updates 1/N of it") {
  PlanArgs a;
  a.params = 1e9;
  a.layers = 16;
  a.hidden = 2048;
  a.heads = 16;
  a.seq_len = 1024;
  a.gpus = 8;
  a.global_batch = 32;
  a.gpu = "a100-80gb";
  const PlanReport report = report_for(a);
  const Evaluation& ddp = report.strategies[0];
  const Evaluation& zero1 = report.strategies[1];
  REQUIRE(ddp.scaling.has_value());
  CHECK(ddp.scaling->optimizer_s == doctest::Approx(28 * 1e9 / 2039e9));  // the whole model on every rank
  CHECK(zero1.scaling->optimizer_s == doctest::Approx(28 * 1e9 / 8 / 2039e9));
  CHECK(ddp.scaling->step_s ==
        doctest::Approx(ddp.scaling->compute_s + ddp.scaling->exposed_s + ddp.scaling->optimizer_s));
  CHECK(contains(render_json(report), "\"optimizer_s\""));
  // Without the memory bandwidth (no --gpu) it is not counted.
  a.gpu.reset();
  a.gpu_tflops = 100;
  a.intra_node_bw_gbs = 100;
  CHECK(report_for(a).strategies[0].scaling->optimizer_s == 0);
}

}  // namespace plan_search_test

#pragma GCC diagnostic pop

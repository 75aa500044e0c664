// dtrain-trainer with tensor and pipeline parallelism as `dtrain plan` counts and launches it (cli/plan/
// trainer_model.h, advisor.h's trainer_refusal, recommend.h's trainer_args), and the step-time terms of those layouts
// (cli/plan/costs/formulas.h). The memory numbers are worked out by hand in the comments; parity.plan_trainer_memory
// holds them to what the trainer reports, and parity.plan_trainer_command runs the emitted command.

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/plan/advisor.h"
#include "cli/plan/recommend.h"
#include "cli/plan/render.h"
#include "cli/plan/request.h"
#include "cli/plan/trainer_model.h"
#include "tests/unit/contains.h"

#pragma GCC diagnostic push   // GCC 12's optional<string> false positive, as in plan_advisor_test.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace plan_trainer_test {

using namespace dtrain::plan;
using dtrain::trainer::GptConfig;
using dtrain::trainer::PipeSchedule;

// L=4 C=64 NH=4 maxT=64 V=Vp=256: the parity tests' model.
GptConfig small() { return GptConfig{64, 256, 256, 4, 4, 64}; }

TrainerLayout layout(int tp, int pp, int dp, int zero, int micro_batches, int micro_batch = 2) {
  TrainerLayout l;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  l.zero = zero;
  l.micro_batches = micro_batches;
  l.micro_batch = micro_batch;
  l.seq_len = 64;
  return l;
}

PlanArgs small_args(int tp, int pp) {
  PlanArgs a;
  a.layers = 4;
  a.hidden = 64;
  a.heads = 4;
  a.seq_len = 64;
  a.vocab = 256;
  a.gpus = 4;
  a.gpus_per_node = 4;
  a.tp = tp;
  a.pp = pp;
  a.micro_batch = 2;
  a.global_batch = 8;
  a.precision = "fp32";
  return a;
}

PlanRequest request(const PlanArgs& args) {
  const auto r = make_request(args);
  REQUIRE_MESSAGE(r.ok(), r.status.message());
  return r.value;
}

TEST_CASE("trainer accounting: T=2 x P=2 without ZeRO, stage by stage, as the trainer reports it") {
  // A layer's slice at T=2: LayerNorms 4C = 256, qkv 3C/2 x C + 3C/2 = 6,240, attention projection C x C/2 + C =
  // 2,112, MLP 2C x C + 2C = 8,320 and C x 2C + C = 8,256: 25,184. Stage 0: wte's rows 128 x 64 = 8,192, wpe 4,096
  // and 2 layers: 62,656 floats. Stage 1: its copy of wte, 2 layers and the final LayerNorm (128): 58,688.
  const auto stages = trainer_stage_memory(small(), layout(2, 2, 1, 0, 4), Precision::fp32);
  REQUIRE(stages.size() == 2);
  CHECK(stages[0].states.params == 4 * 62656);
  CHECK(stages[0].states.grads == 4 * 62656);
  CHECK(stages[0].states.optim == 8 * 62656);
  CHECK(stages[1].states.params == 4 * 58688);
  CHECK(stages[1].states.optim == 8 * 58688);
  // One set (B*T = 128, widths 96/32/128, 2 heads, 128 of the vocabulary): encoded 8,192; ln1, ln2 2 x 16,384;
  // their statistics 512 x 2; qkv 24,576; atty 8,192; att 2 x 2 x 128 x 64 = 32,768; residual2 16,384; fch and
  // fch_gelu 2 x 32,768; residual3 16,384; lnf 8,192 + 256; probs 16,384, losses 128; proj, dresidual, dbtc
  // 3 x 8,192; dbig 16,384; attention backward's scratch 64 x 64: 275,840 floats. 1F1B over 4 micro-batches keeps 2
  // on stage 0 and 1 on stage 1, which also holds the logits, 128 x 128.
  CHECK(stages[0].activation_sets == 2);
  CHECK(stages[1].activation_sets == 1);
  CHECK(stages[0].activations == 4 * 2 * 275840);
  CHECK(stages[1].activations == 4 * (275840 + 16384));
  // Sequence parallelism: the residual stream (encoded, residual2 and residual3 of 2 layers, dresidual) and the
  // LayerNorm statistics on 64 of the 128 tokens, 25,216 floats fewer, and 2C for the LayerNorm gradients.
  TrainerLayout sp = layout(2, 2, 1, 0, 4);
  sp.sequence_parallel = true;
  CHECK(trainer_stage_memory(small(), sp, Precision::fp32)[0].activations == 4 * 2 * (275840 - 25216 + 128));
}

TEST_CASE("trainer accounting: the schedule's activation sets, ZeRO-1 over the data-parallel group, 16 bits") {
  // P=4 over 6 micro-batches: 1F1B keeps 4, 3, 2 and 1; GPipe all 6 on every stage.
  auto p4 = layout(1, 4, 1, 0, 6, 1);
  std::vector<int> sets;
  for (const auto& s : trainer_stage_memory(small(), p4, Precision::fp32)) sets.push_back(s.activation_sets);
  CHECK(sets == std::vector<int>{4, 3, 2, 1});
  p4.schedule = PipeSchedule::gpipe;
  for (const auto& s : trainer_stage_memory(small(), p4, Precision::fp32)) CHECK(s.activation_sets == 6);
  // P=2 x DP=2, ZeRO-1: a layer is 12C^2 + 13C = 49,984 floats; stage 0 holds wte and wpe (20,480) and 2 layers,
  // 120,448 (even: no padding for 2 ranks); stage 1 wte, 2 layers and the final LayerNorm, 116,480. fp32: 4P, 4P,
  // 8P/2.
  const auto zero1 = trainer_stage_memory(small(), layout(1, 2, 2, 1, 2), Precision::fp32);
  CHECK(zero1[0].states.params == 4 * 120448);
  CHECK(zero1[0].states.optim == 4 * 120448);
  CHECK(zero1[1].states.grads == 4 * 116480);
  // bf16: 2P + 4F, 4P, 12P/2, with F the values of stage 1's fp32 kernels: wte 16,384, the final LayerNorm 128 and
  // 13C of each of its 2 layers (other stages' tensors are not counted).
  const auto bf16 = trainer_stage_memory(small(), layout(1, 2, 2, 1, 2), Precision::bf16);
  CHECK(bf16[1].states.params == 2 * 116480 + 4 * (16384 + 128 + 2 * 832));
  CHECK(bf16[1].states.grads == 4 * 116480);
  CHECK(bf16[1].states.optim == 6 * 116480);
  // Without ZeRO in bf16 the parameters have the 16-bit working copy beside the fp32 master: 6 bytes each.
  CHECK(trainer_stage_memory(small(), layout(2, 2, 1, 0, 4), Precision::bf16)[0].states.params == 6 * 62656);
}

TEST_CASE("trainer refusals: the trainer's own rules for --tp, --pp, --zero and --sequence-parallel") {
  CHECK(trainer_layout_refusal(small(), layout(2, 2, 1, 1, 4)).empty());
  CHECK(trainer_layout_refusal(small(), layout(2, 1, 2, 3, 4)).empty());  // ZeRO-3 with --tp alone runs
  CHECK(contains(trainer_layout_refusal(small(), layout(1, 2, 2, 2, 4)), "--zero 2 with --pp 2"));
  CHECK(contains(trainer_layout_refusal(small(), layout(8, 1, 1, 0, 4)), "--tp 8 does not divide"));
  CHECK(contains(trainer_layout_refusal(small(), layout(1, 3, 1, 0, 4)), "--pp 3 does not divide"));
  // A tensor-parallel group of 4 on nodes of 6 ranks would span two of them.
  TrainerLayout spanning = layout(4, 1, 3, 0, 4);
  spanning.ranks_per_node = 6;
  CHECK(contains(trainer_layout_refusal(small(), spanning), "puts a tensor-parallel group across nodes"));
  TrainerLayout odd = layout(2, 1, 1, 0, 1, 1);
  odd.seq_len = 63;
  odd.sequence_parallel = true;
  CHECK(contains(trainer_layout_refusal(small(), odd), "splits a micro-batch's 63 tokens over --tp 2"));
}

TEST_CASE("trainer command: a T=2 x P=2 layout gets dtrain-trainer's flags, on CPUs, with the plan's micro-batches") {
  PlanArgs a = small_args(2, 2);
  a.sequence_parallel = "off";
  a.trainer_accounting = true;
  const PlanReport report = make_report(request(a));
  const Recommendation& rec = report.recommendation;
  REQUIRE(rec.choice.has_value());
  CHECK(rec.choice->layout.stage == 0);
  // 8 sequences / (micro-batch 2 x DP 1) = 4 micro-batches through the pipeline.
  const std::vector<std::string> want = {
      "--layers", "4", "--channels", "64", "--heads", "4", "--max-seq-len", "64", "--vocab", "256", "--tp", "2",
      "--pp", "2", "--pp-schedule", "1f1b", "--zero", "0", "--precision", "fp32", "--batch-size", "2",
      "--grad-accum", "4", "--seq-len", "64", "--device", "cpu"};
  CHECK(rec.trainer_args == want);
  REQUIRE(rec.trainer_notes.size() == 1);
  CHECK(contains(rec.trainer_notes[0], "CPUs only so far"));
  CHECK(contains(rec.spec_lines.back(), "command: [dtrain-trainer, --layers, \"4\""));
  CHECK(contains(rec.spec_lines.back(), "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"));
  CHECK(contains(render_text(report), "dtrain-trainer --layers 4"));
  // The strategies carry the trainer's accounting per stage: stage 0 (2 sets) is the largest.
  const Evaluation& ddp = report.strategies[0];
  REQUIRE(ddp.trainer_stages.size() == 2);
  CHECK(ddp.trainer->params == 4 * 62656);
  CHECK(*ddp.trainer_activations == doctest::Approx(4.0 * 2 * 275840));
  const std::string json = render_json(report);
  CHECK(contains(json, "\"stages\""));
  CHECK(contains(json, "\"activation_sets\": 2"));
  CHECK(contains(json, "\"trainer_notes\""));
  // With sequence parallelism (the plan's default with --tp) the command has the trainer's --sequence-parallel.
  a.sequence_parallel = "on";
  const auto with_sp = make_report(request(a)).recommendation.trainer_args;
  CHECK(std::find(with_sp.begin(), with_sp.end(), "--sequence-parallel") != with_sp.end());
}

TEST_CASE("trainer command: none for what dtrain-trainer does not run, and why, beside Megatron-LM's") {
  PlanArgs a = small_args(2, 1);
  a.zero = 2;
  // ZeRO-2 with --tp alone: the trainer runs it.
  CHECK_FALSE(make_report(request(a)).recommendation.trainer_args.empty());
  // Another model than dtrain-trainer's GPT-2, given by its size.
  PlanArgs sized = small_args(2, 1);
  sized.vocab.reset();
  sized.params = 1e6;
  const Recommendation rec = make_report(request(sized)).recommendation;
  CHECK(rec.trainer_args.empty());
  REQUIRE(rec.trainer_notes.size() == 1);
  CHECK(contains(rec.trainer_notes[0], "splits its own GPT-2 only"));
  CHECK(contains(rec.spec_lines.back(), "--tensor-model-parallel-size 2"));
  // The interleaved schedule: the trainer's --pp-virtual, when its 4 layers divide into P x V chunks (2 micro-batches
  // of 2 a data-parallel rank, a multiple of P = 2).
  const PlanRequest r = request(small_args(1, 2));
  Layout interleaved{0, 1, 2, Recompute::none, false, 2, 2};
  CHECK(trainer_refusal(r, interleaved).empty());
  interleaved.virtual_stages = 4;
  CHECK(contains(trainer_refusal(r, interleaved), "do not divide into --pp x --pp-virtual = 8 chunks"));
  interleaved.virtual_stages = 1;
  CHECK(trainer_refusal(r, interleaved).empty());
}

TEST_CASE("trainer accounting: interleaved stages keep sets of one chunk's layers") {
  dtrain::trainer::GptConfig config;
  config.num_layers = 4;
  config.channels = 64;
  config.num_heads = 4;
  config.max_seq_len = 64;
  config.vocab_size = 256;
  config.padded_vocab_size = 256;
  TrainerLayout plain;
  plain.pp = 2;
  plain.micro_batches = 4;
  plain.micro_batch = 1;
  plain.seq_len = 64;
  TrainerLayout chunked = plain;
  chunked.virtual_stages = 2;
  chunked.schedule = dtrain::trainer::PipeSchedule::interleaved;
  const auto one = trainer_stage_memory(config, plain, Precision::fp32);
  const auto two = trainer_stage_memory(config, chunked, Precision::fp32);
  REQUIRE(two.size() == 2);
  // Stage 0 of P = 2, V = 2, m = 4: a warm-up of (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4 forwards, so 5 sets (schedule.h).
  CHECK(two[0].activation_sets == 5);
  CHECK(one[0].activation_sets == 2);
  CHECK(two[0].layers == one[0].layers);
  CHECK(two[0].states.params == one[0].states.params);
  // Each set holds one micro-batch of one chunk: a layer here, two without interleaving (stage 0 has no logits).
  const auto layers = [&](int n) {
    return trainer_stage_activations(config, 1, n, 1, 64, Precision::fp32, dtrain::trainer::Recompute::none, false);
  };
  CHECK(two[0].activations == 5 * layers(1));
  CHECK(one[0].activations == 2 * layers(2));
}

TEST_CASE("step terms: tensor-parallel allreduces, the tied embedding's sum, the stages' imbalance, SP's sends") {
  // Per micro-batch on the busiest stage: 4 a layer (6 with full recomputation) and the embedding's and the output
  // layer's, both with one stage, the first stage's one of them with several.
  CHECK(tensor_parallel_allreduces(8, 1) == 34);
  CHECK(tensor_parallel_allreduces(8, 1, Recompute::full) == 50);
  CHECK(tensor_parallel_allreduces(3, 4) == 13);
  // 50,000 x 1,000 embedding over t = 2, bf16: 5e7 bytes, an allreduce between two ranks sends all of it once.
  Shape shape{12, 1000, 8, 1024, 1, 0, 50000};
  CHECK(tied_embedding_bytes(shape, 2, 4, Precision::bf16) == doctest::Approx(5e7));
  CHECK(tied_embedding_bytes(shape, 2, 1, Precision::bf16) == 0);
  shape.untied_embeddings = true;
  CHECK(tied_embedding_bytes(shape, 2, 4, Precision::bf16) == 0);
  // L = 4, h = s = 100, V = 1,000, P = 4.1e6 (tied): a layer 6 x 1e6 + 12 x 100 x 100 = 6.12e6 FLOPs a token, the
  // output layer 6e5 on the last stage. Two stages: (2 x 6.12e6 + 6e5) x 2 / (4 x 6.12e6 + 6e5) = 1.0239...
  const Shape four{4, 100, 4, 100, 1, 0, 1000};
  CHECK(stage_imbalance(4.1e6, four, 2) == doctest::Approx(2.568e7 / 2.508e7));
  CHECK(stage_imbalance(4.1e6, four, 1) == 1);
  Shape unknown = four;
  unknown.vocab = 0;
  CHECK(stage_imbalance(4.1e6, unknown, 3) == doctest::Approx(1.5));  // 2 layers a stage, 3 x 2 / 4
  // Sequence parallelism sends each tensor-parallel rank's tokens between stages: 1/t.
  CHECK(pipeline_bytes(four, 2, 4, Precision::fp32, 1, 2) ==
        doctest::Approx(pipeline_bytes(four, 2, 4, Precision::fp32) / 2));
}

TEST_CASE("step time of a T=2 x P=2 layout: its parts add up, the bubble is (p - 1)/m of the busy stage") {
  PlanArgs a = small_args(2, 2);
  a.sequence_parallel = "off";
  a.recompute = "full";
  a.zero = 0;
  a.gpu_tflops = 0.05;
  a.intra_node_bw_gbs = 5;
  const Evaluation e = make_report(request(a)).strategies.at(0);
  REQUIRE(e.scaling.has_value());
  const Scaling& s = *e.scaling;
  const double busy = s.compute_s - s.bubble_s;
  CHECK(s.bubble_s == doctest::Approx(busy * 1.0 / 4));  // p - 1 = 1 over m = 4
  CHECK(busy + s.bubble_s + s.tensor_parallel_s + s.pipeline_s + s.data_parallel_exposed_s + s.optimizer_s ==
        doctest::Approx(s.step_s));
  CHECK(s.tensor_parallel_s == doctest::Approx(*e.comm.tensor_parallel_seconds));
  // Full recomputation: 6 allreduces a layer on 2 layers and the embedding's, 4 micro-batches of 2 x 64 x 64 fp32.
  const Shape shape{4, 64, 4, 64, 2, 0, 256};
  CHECK(e.comm.tensor_parallel == doctest::Approx(tensor_parallel_bytes(shape, 2, 13, 4, Precision::fp32)));
  // The pipeline: 2 x 4 sends of the activations and the tied embedding's 128 x 64 fp32 gradient summed.
  CHECK(e.comm.pipeline == doctest::Approx(pipeline_bytes(shape, 2, 4, Precision::fp32) + 128.0 * 64 * 4));
  CHECK(contains(render_json(make_report(request(a))), "\"pipeline_bubble_s\""));
}

}  // namespace plan_trainer_test

#pragma GCC diagnostic pop

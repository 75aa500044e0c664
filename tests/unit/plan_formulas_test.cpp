// The formulas of `dtrain plan` (cli/plan/costs/formulas.h) against numbers worked out by hand in each case's comment.

#include <doctest/doctest.h>

#include <stdexcept>

#include "cli/plan/costs/formulas.h"
#include "cli/plan/trainer_model.h"
#include "cli/plan/costs/units.h"

using namespace dtrain::plan;

namespace {

// The ZeRO paper's Fig. 1 example: 7.5B parameters on 64 GPUs, K = 12.
constexpr double kPaperParams = 7.5e9;
constexpr int kPaperGpus = 64;

// GPT-3 2.7B-like layer: s = 2048, b = 1, h = 4096, a = 32 (5as/h = 80; s*b*h = 8,388,608).
const Shape kLayer{32, 4096, 32, 2048, 1};

}  // namespace

TEST_CASE("zero_model_states: the ZeRO paper's example gives 120, 31.4, 16.6 and 1.9 GB per GPU") {
  const char* const expected[] = {"120.0 GB", "31.4 GB", "16.6 GB", "1.9 GB"};
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    CHECK(format_gb(zero_model_states(stage, Precision::bf16, kPaperParams, kPaperGpus).total()) == expected[stage]);
  }
  // Exactly: 16P; 4P + 12P/64; 2P + 14P/64; 16P/64.
  CHECK(zero_model_states(0, Precision::bf16, kPaperParams, 64).total() == doctest::Approx(120e9));
  CHECK(zero_model_states(1, Precision::bf16, kPaperParams, 64).total() == doctest::Approx(31.40625e9));
  CHECK(zero_model_states(2, Precision::bf16, kPaperParams, 64).total() == doctest::Approx(16.640625e9));
  CHECK(zero_model_states(3, Precision::bf16, kPaperParams, 64).total() == doctest::Approx(1.875e9));
  // The split at stage 1: 2P params, 2P grads, 12P/N optimizer.
  const ModelStates one = zero_model_states(1, Precision::fp16, kPaperParams, 64);
  CHECK(one.params == doctest::Approx(15e9));
  CHECK(one.grads == doctest::Approx(15e9));
  CHECK(one.optim == doctest::Approx(1.40625e9));
}

TEST_CASE("zero_model_states: fp32 is 16P, 8P + 8P/N, 4P + 12P/N, 16P/N") {
  CHECK(zero_model_states(0, Precision::fp32, 1e9, 8).total() == doctest::Approx(16e9));
  CHECK(zero_model_states(1, Precision::fp32, 1e9, 8).total() == doctest::Approx(9e9));
  CHECK(zero_model_states(2, Precision::fp32, 1e9, 8).total() == doctest::Approx(5.5e9));
  CHECK(zero_model_states(3, Precision::fp32, 1e9, 8).total() == doctest::Approx(2e9));
  CHECK_THROWS_AS(zero_model_states(4, Precision::fp32, 1e9, 8), std::invalid_argument);
}

TEST_CASE("activations: Korthikanti's s*b*h*(34 + 5as/h), its tensor-parallel form, and pipelining") {
  // 8,388,608 * (34 + 80) = 956,301,312 bytes per layer in 16 bits; fp32 twice that.
  CHECK(layer_activation_bytes(kLayer, 1, Precision::bf16) == doctest::Approx(956301312.0));
  CHECK(layer_activation_bytes(kLayer, 1, Precision::fp32) == doctest::Approx(1912602624.0));
  // t = 8: 10 + 24/8 + 80/8 = 23 -> 192,937,984.
  CHECK(layer_activation_bytes(kLayer, 8, Precision::bf16) == doctest::Approx(192937984.0));
  // All 32 layers for one micro-batch.
  CHECK(activation_bytes(kLayer, 1, 1, 4, Precision::bf16) == doctest::Approx(32 * 956301312.0));
  // 4 stages of 8 layers, 8 micro-batches: 1F1B keeps 4 in flight on the first stage: 32 layers' worth again.
  CHECK(activation_bytes(kLayer, 1, 4, 8, Precision::bf16) == doctest::Approx(32 * 956301312.0));
  // Only 2 micro-batches: 2 x 8 layers.
  CHECK(activation_bytes(kLayer, 1, 4, 2, Precision::bf16) == doctest::Approx(16 * 956301312.0));
}

TEST_CASE("pipeline bubble: (p - 1) / (m + p - 1)") {
  CHECK(pipeline_bubble(4, 8) == doctest::Approx(3.0 / 11));
  CHECK(pipeline_bubble(8, 1) == doctest::Approx(7.0 / 8));
  CHECK(pipeline_bubble(1, 16) == 0);
}

TEST_CASE("interleaved stages: the bubble (p - 1)/(v*m + p - 1), v times the sends, more in flight") {
  CHECK(pipeline_bubble(4, 8, 2) == doctest::Approx(3.0 / 19));
  Shape s{8, 1024, 16, 512, 1};
  CHECK(pipeline_bytes(s, 4, 8, Precision::bf16, 2) == doctest::Approx(2 * pipeline_bytes(s, 4, 8, Precision::bf16)));
  // Korthikanti Sec. 4.2.3: the first stage holds 1 + (p - 1)/(p*v) times 1F1B's activations.
  CHECK(activation_bytes(s, 1, 4, 8, Precision::bf16, Recompute::none, false, 2) ==
        doctest::Approx(activation_bytes(s, 1, 4, 8, Precision::bf16) * (1 + 3.0 / 8)));
}

TEST_CASE("recomputation and sequence parallelism: Korthikanti's Table 2, and the FLOPs they cost") {
  // s = 2048, b = 1, h = 12288, a = 96, t = 8: sbh = 25,165,824.
  const Shape gpt3{96, 12288, 96, 2048, 1};
  const double sbh = 2048.0 * 12288;
  const double scores = 5.0 * 96 * 2048 / 12288;  // 80
  CHECK(layer_activation_bytes(gpt3, 8, Precision::bf16) == doctest::Approx(sbh * (10 + 24.0 / 8 + scores / 8)));
  CHECK(layer_activation_bytes(gpt3, 8, Precision::bf16, Recompute::none, true) ==
        doctest::Approx(sbh * (34 + scores) / 8));
  CHECK(layer_activation_bytes(gpt3, 8, Precision::bf16, Recompute::selective, true) == doctest::Approx(sbh * 34 / 8));
  CHECK(layer_activation_bytes(gpt3, 8, Precision::bf16, Recompute::selective) == doctest::Approx(sbh * 13));
  CHECK(layer_activation_bytes(gpt3, 8, Precision::bf16, Recompute::full) == doctest::Approx(2 * sbh));
  CHECK(layer_activation_bytes(gpt3, 8, Precision::bf16, Recompute::full, true) == doctest::Approx(2 * sbh / 8));
  // PaLM's model FLOPs per token and the recomputation factors.
  CHECK(model_flops_per_token(175e9, gpt3) == doctest::Approx(6 * 175e9 + 12.0 * 96 * 12288 * 2048));
  CHECK(recompute_flops_factor(gpt3, Recompute::none) == 1);
  CHECK(recompute_flops_factor(gpt3, Recompute::full) == doctest::Approx(4.0 / 3));
  CHECK(recompute_flops_factor(gpt3, Recompute::selective) == doctest::Approx(1 + 2048.0 / (18 * 12288 + 3 * 2048)));
}

TEST_CASE("communication: ring bytes per GPU for data, tensor and pipeline parallelism") {
  CHECK(ring_gather_bytes(1e9, 4) == doctest::Approx(0.75e9));
  CHECK(ring_allreduce_bytes(1e9, 4) == doctest::Approx(1.5e9));
  CHECK(ring_allreduce_bytes(1e9, 1) == 0);
  // P = 1e9 in bf16 (2e9 bytes) over 4 ranks, 3 micro-steps; one collective sends 1.5e9.
  CHECK(data_parallel_bytes(0, 1e9, 4, 3, Precision::bf16) == doctest::Approx(3e9));     // allreduce once
  CHECK(data_parallel_bytes(1, 1e9, 4, 3, Precision::bf16) == doctest::Approx(3e9));     // RS + AG
  CHECK(data_parallel_bytes(2, 1e9, 4, 3, Precision::bf16) == doctest::Approx(6e9));     // 3 RS + AG
  CHECK(data_parallel_bytes(3, 1e9, 4, 3, Precision::bf16) == doctest::Approx(13.5e9));  // 3 x (2 AG + RS)
  CHECK(data_parallel_bytes(1, 1e9, 4, 1, Precision::fp32) == doctest::Approx(6e9));
  // 16,777,216 bytes of activations per allreduce, 2 * 7/8 of it per GPU, 4 per layer, 8 layers, 2 micro-steps.
  CHECK(tensor_parallel_bytes(kLayer, 8, 4 * 8, 2, Precision::bf16) == doctest::Approx(1879048192.0));
  CHECK(tensor_parallel_bytes(kLayer, 1, 4 * 8, 2, Precision::bf16) == 0);
  // Forward activations and backward gradients per micro-batch: 2 * 8 * 16,777,216.
  CHECK(pipeline_bytes(kLayer, 4, 8, Precision::bf16) == doctest::Approx(268435456.0));
  CHECK(pipeline_bytes(kLayer, 1, 8, Precision::bf16) == 0);
}

TEST_CASE("accumulation: the fewest micro-steps that reach the global batch") {
  const Accumulation exact = accumulation(512, 4, 16);  // 64 a micro-step
  CHECK(exact.micro_steps == 8);
  CHECK(exact.global_batch == 512);
  CHECK(exact.exact);
  const Accumulation over = accumulation(1000, 4, 16);  // 15.6 -> 16 micro-steps, 1024
  CHECK(over.micro_steps == 16);
  CHECK(over.global_batch == 1024);
  CHECK_FALSE(over.exact);
  CHECK(accumulation(10, 4, 16).micro_steps == 1);
}

TEST_CASE("fits: at most 90% of the GPU's memory") {
  CHECK(fits(72e9, 80e9));
  CHECK_FALSE(fits(72.1e9, 80e9));
  CHECK(fits(0.9 * 141e9, 141e9));
}

TEST_CASE("compute: 6 FLOPs per parameter per token") {
  CHECK(compute_seconds(1e9, 4096, 1e14) == doctest::Approx(6 * 4096e9 / 1e14));
}

TEST_CASE("last bucket: what is left of the gradients after the 1 MiB first bucket and whole buckets") {
  // dtrain-trainer's bench model (3,290,624 fp32 parameters): 13,162,496 bytes = 1 MiB + 12,113,920.
  CHECK(last_bucket_bytes(13162496, kMaxBucketBytes) == 12113920);
  // 2 MiB buckets: 12,113,920 - 5 x 2,097,152 = 1,628,160.
  CHECK(last_bucket_bytes(13162496, 2 * 1048576.0) == 1628160);
  // Within the first bucket: all of it. A whole number of buckets after it: one whole bucket.
  CHECK(last_bucket_bytes(524288, kMaxBucketBytes) == 524288);
  CHECK(last_bucket_bytes(1048576 + 2.0 * kMaxBucketBytes, kMaxBucketBytes) == kMaxBucketBytes);
  // The trainer's default for that model (gradient / 8 = 1,645,312-byte buckets): 12,113,920 - 7 x 1,645,312.
  CHECK(last_bucket_bytes(13162496, default_bucket_bytes(13162496)) == 596736);
}

TEST_CASE("exposed data-parallel time: backward hides reductions, not forward, the last bucket or ZeRO's all-gather") {
  // compute 0.9 s: backward 0.6 s. DDP, 0.5 s of allreduce, 10% in the last bucket: only the last 0.05 s shows.
  CHECK(exposed_data_parallel_seconds(0, 0.5, 0.9, 1, 0.1) == doctest::Approx(0.05));
  // 2 micro-steps: only the last one's backward (0.3 s) hides the other 0.45 s: 0.05 + 0.15.
  CHECK(exposed_data_parallel_seconds(0, 0.5, 0.9, 2, 0.1) == doctest::Approx(0.2));
  // More communication than backward: 0.05 + (1.5 - 0.05 - 0.6).
  CHECK(exposed_data_parallel_seconds(0, 1.5, 0.9, 1, 0.1) == doctest::Approx(0.9));
  // ZeRO-1: the all-gather (half of 0.5 s) after the optimizer step shows in full.
  CHECK(exposed_data_parallel_seconds(1, 0.5, 0.9, 1, 0.1) == doctest::Approx(0.25));
  // ZeRO-2 over 3 micro-steps: 0.8 s = 3 reduce-scatters (0.6 s, behind 0.6 s of backward) + the all-gather 0.2 s.
  CHECK(exposed_data_parallel_seconds(2, 0.8, 0.9, 3, 0.1) == doctest::Approx(0.2));
  // ZeRO-3: prefetched through forward and backward: only what exceeds compute.
  CHECK(exposed_data_parallel_seconds(3, 1.0, 0.9, 1, 0.1) == doctest::Approx(0.1));
  CHECK(exposed_data_parallel_seconds(3, 0.5, 0.9, 4, 0.1) == 0);
  CHECK_THROWS_AS(exposed_data_parallel_seconds(4, 0.5, 0.9, 1, 0.1), std::invalid_argument);
}

TEST_CASE("units: GB is 1e9 bytes, GiB 2^30; bad sizes name themselves") {
  CHECK(parse_bytes("80GB").value == 80e9);
  CHECK(parse_bytes("80 GB").value == 80e9);
  CHECK(parse_bytes("80").value == 80e9);
  CHECK(parse_bytes("80GiB").value == 80.0 * 1073741824.0);
  CHECK(parse_bytes("1.5TB").value == 1.5e12);
  CHECK(parse_bytes("512MiB").value == 512.0 * 1048576.0);
  CHECK(parse_bytes(".5TB").value == 0.5e12);
  CHECK(parse_bytes("8e1GB").value == 80e9);
  CHECK(parse_bytes("80E0 GiB").value == 80.0 * 1073741824.0);
  for (const char* bad : {"", "abc", "-5GB", "+5GB", " 5GB", "0", "80XB", "nan", "inf", "infinity", "GB", "0x10",
                          "0x10GB", "0x1p4GB", ".", "5e", "1e400GB"}) {
    CAPTURE(bad);
    const auto r = parse_bytes(bad);
    CHECK_FALSE(r.ok());
    CHECK(r.status.message().find("is not a size") != std::string::npos);
  }
  for (const char* huge : {"1e10GB", "1e308GiB", "1001TB"}) {
    CAPTURE(huge);
    CHECK(parse_bytes(huge).status.message().find("is more than a GPU's memory can be") != std::string::npos);
  }
  CHECK(parse_bytes("1e-300").status.message().find("is less than a GPU's memory can be") != std::string::npos);
  std::size_t used = 0;
  CHECK(parse_decimal("7.5e9x", used) == 7.5e9);
  CHECK(used == 5);
  CHECK(parse_decimal("0x10", used) == 0.0);   // the number is "0"; "x10" is left for the caller to refuse
  CHECK(used == 1);
  CHECK_FALSE(parse_decimal("inf", used).has_value());
  CHECK(format_gb(31.40625e9) == "31.4 GB");
  CHECK(format_gb(12.3e6) == "12.3 MB");
  CHECK(format_seconds(0.0351) == "35.1 ms");
  CHECK(format_seconds(2.5) == "2.50 s");
}

TEST_CASE("trainer accounting: what dtrain-trainer reports for its tiny model on 2 ranks") {
  // tiny: L=2 C=64 V=Vp=256 maxT=64. Units: (256 + 64) * 64 = 20,480; per layer 12C^2 + 13C = 49,984; lnf 128;
  // all even, so P = 120,576 padded for 2 ranks. fp32 kernels' values F = 20,480 + 2 * 13C + 128 = 22,272.
  const auto tiny = dtrain::trainer::GptConfig::preset("tiny");
  CHECK(trainer_params(tiny) == 120576);
  CHECK(fp32_kernel_values(dtrain::trainer::ParamLayout(tiny, 2)) == 22272);
  CHECK_FALSE(trainer_model_states(tiny, 0, Precision::bf16, 2).has_value());
  const auto fp32 = *trainer_model_states(tiny, 1, Precision::fp32, 2);
  CHECK(fp32.params == 482304);  // 4P
  CHECK(fp32.grads == 482304);   // 4P
  CHECK(fp32.optim == 482304);   // 8P/2
  const auto bf16 = *trainer_model_states(tiny, 1, Precision::bf16, 2);
  CHECK(bf16.params == 241152 + 89088);  // 2P + 4F
  CHECK(bf16.grads == 482304);           // fp32 gradients, 4P (the paper counts 2P)
  CHECK(bf16.optim == 723456);           // 12P/2
  const auto three = *trainer_model_states(tiny, 3, Precision::bf16, 2);
  CHECK(three.params == 120576);  // 2P/2
  CHECK(three.grads == 241152);   // 4P/2
}

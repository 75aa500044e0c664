// The costs `dtrain plan` weighs beside bytes and FLOPs (cli/plan/costs/formulas.h): NCCL's collective latencies,
// the data-parallel collectives a step starts, Megatron-LM's bytes per parameter, the embedding on the pipeline's
// end stages, uneven stages, and flash attention. Each expected value is worked out in its comment.

#include <doctest/doctest.h>

#include <stdexcept>

#include "cli/plan/costs/formulas.h"

namespace plan_costs_test {

using namespace dtrain::plan;

TEST_CASE("collective latency: NCCL's ring, tree and PAT, the least that applies") {
  CHECK(collective_latency_seconds(Collective::allreduce, 1, 1) == 0);
  // 8 GPUs of one node. All-gather: ring 8.4 + 7 * 3.4 = 32.2 us. Allreduce: ring 8.4 + 14 * 3.4 = 56 us; tree
  // 8.4 + 2 * 7 * 4.0 = 64.4 us: the ring.
  CHECK(collective_latency_seconds(Collective::all_gather, 8, 1) == doctest::Approx(32.2e-6));
  CHECK(collective_latency_seconds(Collective::allreduce, 8, 1) == doctest::Approx(56e-6));
  // 1,024 ranks on 128 nodes of 8. All-gather: ring 8.4 + (1023 - 127) * 3.4 + 127 * 14 = 4832.8 us (no PAT: 8 a
  // node). Allreduce: tree 8.4 + 2 * (7 * 4 + 7 * 14) = 260.4 us, far below the ring's.
  CHECK(collective_latency_seconds(Collective::all_gather, 1024, 128) == doctest::Approx(4832.8e-6));
  CHECK(collective_latency_seconds(Collective::reduce_scatter, 1024, 128) == doctest::Approx(4832.8e-6));
  CHECK(collective_latency_seconds(Collective::allreduce, 1024, 128) == doctest::Approx(260.4e-6));
  // 1,024 ranks, one a node: PAT 8 + 10 * 4 + 1024 * 2.8 = 2915.2 us against the ring's 8.4 + 1023 * 14.
  CHECK(collective_latency_seconds(Collective::all_gather, 1024, 1024) == doctest::Approx(2915.2e-6));
  // It grows with the ranks: a ring over thousands waits milliseconds.
  CHECK(collective_latency_seconds(Collective::all_gather, 8192, 1024) >
        10 * collective_latency_seconds(Collective::all_gather, 512, 64));
}

TEST_CASE("data-parallel collectives: Megatron's buckets of max(40M, 1M * dp) parameters; FSDP's per layer") {
  CHECK(data_parallel_collectives(0, 1e9, 1, 1, 24) == 0);  // one rank: nothing to reduce
  // 1e9 parameters over 8 ranks: buckets of 40M, 25 of them.
  CHECK(data_parallel_collectives(0, 1e9, 8, 4, 24) == 25);
  CHECK(data_parallel_collectives(1, 1e9, 8, 4, 24) == 50);        // reduce-scatter and all-gather
  CHECK(data_parallel_collectives(2, 1e9, 8, 4, 24) == 25 * 5);    // 4 reduce-scatters and an all-gather
  CHECK(data_parallel_collectives(3, 1e9, 8, 4, 24) == 3 * 4 * 24);
  // Over 1,000 ranks the buckets are 1e9 parameters: one.
  CHECK(data_parallel_collectives(0, 1e9, 1000, 1, 24) == 1);
  // Given buckets (--ddp-bucket-mb) instead: 1e9 / 1e7 = 100.
  CHECK(data_parallel_collectives(0, 1e9, 8, 1, 24, 1e7) == 100);
}

TEST_CASE("Megatron's bytes per parameter: 18 / 6 + 12/d in bf16, 20 / 4 + 16/d in fp16, 16 / 8 + 8/d in fp32") {
  const double p = 1e9;
  CHECK(megatron_model_states(false, Precision::bf16, p, 64).total() == doctest::Approx(18e9));
  CHECK(megatron_model_states(true, Precision::bf16, p, 64).total() == doctest::Approx(6e9 + 12e9 / 64));
  CHECK(megatron_model_states(false, Precision::fp16, p, 64).total() == doctest::Approx(20e9));
  CHECK(megatron_model_states(true, Precision::fp16, p, 64).total() == doctest::Approx(4e9 + 16e9 / 64));
  CHECK(megatron_model_states(false, Precision::fp32, p, 64).total() == doctest::Approx(16e9));
  CHECK(megatron_model_states(true, Precision::fp32, p, 64).total() == doctest::Approx(8e9 + 8e9 / 64));
  // The fp32 gradient buffer of bf16 training is whole on every rank: 4P, where the ZeRO paper counts 2P.
  CHECK(megatron_model_states(true, Precision::bf16, p, 64).grads == doctest::Approx(4e9));
  CHECK_THROWS_AS(megatron_model_states(true, Precision::bf16, p, 0), std::invalid_argument);
}

TEST_CASE("stages: uneven splits put the rest on the last stage; the embedding sits on the end stages") {
  CHECK(stage_layers(70, 12) == 6);  // BLOOM's 70 layers on 12 stages: 11 x 6 and 4 on the last
  CHECK(splits_layers(70, 12));
  CHECK(splits_layers(32, 5));        // 4 x 7 and 4
  CHECK_FALSE(splits_layers(32, 12));  // 11 x 3 = 33: nothing left for the last
  CHECK_FALSE(splits_layers(4, 5));
  CHECK(stage_layers(96, 1) == 96);
  // 12 layers of 1e8 parameters and a tied 50,000 x 1,000 embedding (5e7): P = 1.25e9. 4 stages at t = 2: 3 layers
  // and the embedding, (3e8 + 5e7) / 2. Untied (P = 1.3e9 then): the same. Without the vocabulary: P / (t * p).
  Shape shape{12, 1000, 8, 1024, 1, 0, 50000};
  CHECK(stage_params(1.25e9, shape, 2, 4) == doctest::Approx(1.75e8));
  shape.untied_embeddings = true;
  CHECK(stage_params(1.3e9, shape, 2, 4) == doctest::Approx(1.75e8));
  CHECK(stage_params(1.3e9, shape, 2, 1) == doctest::Approx(6.5e8));  // one stage holds all
  shape.vocab = 0;
  CHECK(stage_params(1.3e9, shape, 2, 4) == doctest::Approx(1.3e9 / 8));
}

TEST_CASE("flash attention: no s x s scores kept, nothing for selective recomputation to save or redo") {
  Shape eager{32, 4096, 32, 2048, 1};  // 5as/h = 80, s*b*h = 8,388,608
  Shape flash = eager;
  flash.flash_attention = true;
  CHECK(layer_activation_bytes(eager, 1, Precision::bf16) == doctest::Approx(8388608.0 * 114));
  CHECK(layer_activation_bytes(flash, 1, Precision::bf16) == doctest::Approx(8388608.0 * 34));
  CHECK(layer_activation_bytes(flash, 1, Precision::bf16) ==
        doctest::Approx(layer_activation_bytes(eager, 1, Precision::bf16, Recompute::selective)));
  CHECK(recompute_flops_factor(flash, Recompute::selective) == 1);
  CHECK(recompute_flops_factor(eager, Recompute::selective) == doctest::Approx(1 + 2048.0 / (18 * 4096 + 3 * 2048)));
  CHECK(recompute_flops_factor(flash, Recompute::full) == doctest::Approx(4.0 / 3));
}

TEST_CASE("optimizer step: 28 bytes a parameter of the shard at the memory bandwidth; not counted without it") {
  CHECK(optimizer_seconds(1e9, 2e12) == doctest::Approx(0.014));
  CHECK(optimizer_seconds(1e9, 0) == 0);
}

TEST_CASE("activations of other layers: grouped-query attention and SwiGLU, term by term") {
  // GPT's layer: 10 + 24/t. Llama 3 8B's: h = 4096, 32 heads, 8 key/value (r = 1/4), SwiGLU f = 14336 (3.5h): the
  // split part 4 + 4/4 + 6 * 3.5 = 26, so 10 + 26 = 36 at t = 1, 10 + 26/8 at t = 8, 36/8 with sequence parallelism.
  Shape llama{32, 4096, 32, 8192, 1, 8};
  llama.ffn = 14336;
  llama.gated_mlp = true;
  llama.flash_attention = true;
  const double sbh = 8192.0 * 4096;
  CHECK(layer_activation_bytes(llama, 1, Precision::bf16) == doctest::Approx(sbh * 36));
  CHECK(layer_activation_bytes(llama, 8, Precision::bf16) == doctest::Approx(sbh * (10 + 26.0 / 8)));
  CHECK(layer_activation_bytes(llama, 8, Precision::bf16, Recompute::none, true) == doctest::Approx(sbh * 36 / 8));
  // A GELU MLP of f = 4h and full attention is GPT's 34.
  Shape gpt = llama;
  gpt.kv_heads = 0;
  gpt.ffn = 0;
  gpt.gated_mlp = false;
  CHECK(layer_activation_bytes(gpt, 1, Precision::bf16) == doctest::Approx(sbh * 34));
}

}  // namespace plan_costs_test

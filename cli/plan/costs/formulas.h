#pragma once

// The arithmetic of `dtrain plan`: plain functions of numbers, each with its source. Everything is in bytes,
// values, seconds and FLOP/s; GB (1e9 bytes) appears only where text is printed (units.h).
// Symbols, as the sources write them: P parameters (the ZeRO paper's Ψ), N (or dp) data-parallel ranks,
// t tensor-parallel ranks, p pipeline stages, m (or k) micro-batches per optimizer step, and for one micro-batch
// s sequence length, b micro-batch size, h hidden size, a attention heads, L layers.

#include "trainer/model/config.h"
#include "trainer/parallel/ddp/buckets.h"

namespace dtrain::plan {

enum class Precision { fp32, bf16, fp16 };
const char* precision_name(Precision precision);
// Bytes of one activation or communicated value: 2 for bf16/fp16, 4 for fp32.
double value_bytes(Precision precision);

// Bytes one GPU holds for the model states (parameters, gradients, optimizer state).
struct ModelStates {
  double params = 0;
  double grads = 0;
  double optim = 0;
  double total() const { return params + grads + optim; }
};

// ZeRO paper (Rajbhandari et al., arXiv:1910.02054, Sec. 5.1 and Fig. 1), mixed-precision Adam, K = 12: 16-bit
// parameters 2P, 16-bit gradients 2P, optimizer state KP (fp32 master 4P, momentum 4P, variance 4P):
//   stage 0 (DDP): 2P + 2P + 12P = 16P             stage 2: 2P + (2 + 12)P/N
//   stage 1:       2P + 2P + 12P/N                 stage 3: (2 + 2 + 12)P/N
// fp32 (no master copy; the same sharding): params 4P, gradients 4P, momentum and variance 8P:
//   16P, 8P + 8P/N, 4P + 12P/N, 16P/N (what dtrain-trainer reports in fp32: README "--zero").
// stage: 0..3 (throws std::invalid_argument otherwise); dp >= 1.
ModelStates zero_model_states(int stage, Precision precision, double params, int dp);

// Megatron-LM's own accounting (docs/source/api-guide/dist_optimizer.md, core_v0.12.0): bytes per parameter,
// non-distributed / distributed optimizer over d data-parallel ranks: bf16 parameters with fp32 gradients 18 /
// 6 + 12/d (the fp32 gradient buffer is whole on every rank), fp16 parameters and gradients 20 / 4 + 16/d (fp32
// main gradients sharded with the optimizer), fp32 16 / 8 + 8/d. distributed: --use-distributed-optimizer (ZeRO-1's
// place in the search).
ModelStates megatron_model_states(bool distributed, Precision precision, double params, int dp);

// One micro-batch's shape.
struct Shape {
  int layers = 0;       // L
  int hidden = 0;       // h
  int heads = 0;        // a
  int seq_len = 0;      // s
  int micro_batch = 1;  // b
  int kv_heads = 0;     // key/value heads with grouped-query attention; 0: as many as heads. Megatron splits
                        // whole query groups over the tensor-parallel ranks, so t divides them too.
  int vocab = 0;        // V, for the embedding and output layer on the first and last stages; 0: not known
  bool untied_embeddings = false;  // the output layer its own V x h matrix (Llama), not the embedding's (GPT)
  int ffn = 0;                     // the MLP's inner size f; 0: GPT's 4h
  bool gated_mlp = false;          // SwiGLU (Llama: gate, up, down matrices), not GPT's GELU MLP
  // Flash (fused) attention: the attention core's s x s scores are never stored, backward recomputes them inside
  // the kernel (Dao et al., arXiv:2205.14135, Sec. 3.1); what Megatron-LM with Transformer Engine, torchtitan
  // (scaled_dot_product_attention) and current Hugging Face models run by default.
  bool flash_attention = false;
};

// Activation recomputation (Korthikanti et al. 2022, Sec. 5): none keeps every activation backward needs; selective
// recomputes the attention core (QK^T, softmax, dropout, attention over V), whose activations are the 5as^2b term;
// full keeps only each layer's input and runs the layer's forward again in backward (Megatron-LM
// --recompute-granularity selective | full).
// The trainer's own (trainer/model/config.h): the plan's layouts and dtrain-trainer's --recompute are one thing.
using trainer::Recompute;
using trainer::recompute_name;  // "none", "selective", "full"

// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, Sec. 4 and
// Table 2), bytes one transformer layer keeps for backward with 16-bit activations (attention 11sbh + 5as^2b, MLP
// 19sbh, the two LayerNorms 4sbh; dropout masks at 1 byte a value), on each of t tensor-parallel ranks:
//   no recomputation, no sequence parallelism (Sec. 4.2.1: LayerNorm and dropout inputs whole on every rank):
//     s*b*h*(10 + 24/t + 5*a*s/(h*t))
//   no recomputation, sequence parallelism (Sec. 4.2.2: those split over the sequence too): s*b*h*(34 + 5*a*s/h)/t
//   selective recomputation (Sec. 5, Table 2): the 5as^2b term goes: s*b*h*(10 + 24/t), or 34*s*b*h/t with sequence
//     parallelism
//   full recomputation (Table 2): the layer's input alone, 2*s*b*h, split over t with sequence parallelism
// Flash attention keeps no 5as^2b term either (Shape::flash_attention), so without recomputation it holds what
// selective recomputation holds.
// Other layers than GPT's, by the same accounting term by term: of the 24 sbh that tensor parallelism splits, the
// attention's are Q, K, V and the output projection's input (2 + 2 + 2 + 2), and with grouped-query attention K and
// V are kv_heads/heads of Q's size: 4 + 4r, r = kv_heads/heads; the MLP's are its first linear's output and the
// activation's output (2f + 2f for f = 4h: 16), and a SwiGLU MLP keeps gate, up and silu(gate) outputs: 6f/h. So
// the 24 is 4 + 4r + 4f/h (GELU) or 4 + 4r + 6f/h (SwiGLU); the 10 unsplit stay (LayerNorm/RMSNorm inputs, the
// attention's and MLP's inputs, the dropout masks: an upper bound for models without dropout).
// fp32 doubles it (every kept tensor at 4 bytes; an upper bound, as the masks stay 1 byte).
double layer_activation_bytes(const Shape& shape, int tp, Precision precision, Recompute recompute = Recompute::none,
                              bool sequence_parallel = false);

// Activations one GPU holds at the peak of a step, for the transformer layers (the paper's smaller terms for the
// embeddings and the output layer are not counted). Without pipelining, one micro-batch through all L layers. With
// p stages, 1F1B (Narayanan et al., arXiv:2104.04473, Sec. 2.2.1; Korthikanti Sec. 4.2.3) keeps up to p
// micro-batches in flight on the first stage, each through its stage_layers(L, p) layers: min(m, p) of them.
// With v interleaved stages per GPU (Megatron's interleaved 1F1B) the first stage holds more: a factor of
// 1 + (p - 1)/(p*v) (Korthikanti Sec. 4.2.3).
double activation_bytes(const Shape& shape, int tp, int pp, int micro_batches, Precision precision,
                        Recompute recompute = Recompute::none, bool sequence_parallel = false, int virtual_stages = 1);

// Pipeline stages need not divide the layers: the first p - 1 stages hold ceil(L/p) layers each and the last the
// rest, at least one (Megatron-LM --decoder-last-pipeline-num-layers, core_v0.12.0; DeepSpeed's PipelineModule
// partitions by layer count too). stage_layers is the most a stage holds; splits_layers whether p stages can split
// L layers so. The slowest stage sets the pipeline's pace: a step computes stage_layers * p / L times the even split.
int stage_layers(int layers, int pp);
bool splits_layers(int layers, int pp);

// Parameters on the GPU of the most loaded pipeline stage, over t tensor-parallel ranks. Without the vocabulary, or
// with one stage, P / (t*p). With p > 1 stages, the first stage holds the input embedding (V*h) and the last the
// output layer (V*h: its own matrix, or, tied, Megatron's copy of the embedding; Narayanan et al. Sec. 3.1 place
// them so): stage_layers layers of (P - V*h*(1 or 2)) / L parameters plus V*h, over t (Megatron splits both over the
// vocabulary: VocabParallelEmbedding, the column-parallel output layer).
double stage_params(double params, const Shape& shape, int tp, int pp);

// Model FLOPs per token, forward and backward (Chowdhery et al., "PaLM", arXiv:2204.02311, Appendix B):
// 6P + 12*L*h*s, the second term attention's QK^T and scores-times-V, which the 6P of the weights leaves out.
double model_flops_per_token(double params, const Shape& shape);

// The FLOPs a step runs over its model FLOPs: 1 without recomputation; full recomputation runs each layer's forward
// again, 4/3 (forward 1 of 3 parts, Kaplan et al. Sec. 2.1; Narayanan et al. Sec. 3.5 count it so); selective the
// attention core's forward again, 4bs^2h of a layer's 72bsh^2 + 12bs^2h (Korthikanti Sec. 5, Eq. 2-3):
// 1 + s / (18h + 3s). With flash attention selective recomputation has nothing left to recompute (the kernel's own
// backward does it, as it does without recomputation): 1.
double recompute_flops_factor(const Shape& shape, Recompute recompute);

// The fraction of a step a pipeline of p stages stands idle with m micro-batches: (p - 1) / (m + p - 1) (GPipe,
// Huang et al., arXiv:1811.06965, Sec. 2.3; the same bubble for Megatron's 1F1B, Narayanan et al. Sec. 2.2.1: idle
// time (p - 1)/m of the ideal). With v interleaved stages per GPU the idle time is (p - 1)/(v*m) of the ideal
// (Narayanan et al. Sec. 2.2.2): (p - 1) / (v*m + p - 1) of the step.
double pipeline_bubble(int pp, int micro_batches, int virtual_stages = 1);

// Ring collectives (NCCL's algorithms; the bus bandwidth of nccl-tests' PERFORMANCE.md): a reduce-scatter or an
// all-gather of B bytes in all sends (n - 1)/n * B from each rank; an allreduce is one of each, 2(n - 1)/n * B.
double ring_gather_bytes(double bytes, int n);
double ring_allreduce_bytes(double bytes, int n);

// The latency of one NCCL collective over `ranks` GPUs on `nodes` nodes (ranks / nodes per node), in seconds, as
// NCCL 2.30.7 models it for its choice of algorithm (src/graph/tuning.cc, ncclTopoTuneModel; the Simple protocol,
// the one whose bandwidth the byte terms assume):
//   ring: base 8.4 us + each of its steps (n - 1 for an all-gather or reduce-scatter, 2(n - 1) for an allreduce) at
//         3.4 us over NVLink, of which those that cross nodes (nodes - 1, or 2(nodes - 1)) at 14 us over the network
//   tree (allreduce): 8.4 us + 2 * ((ranks per node - 1) * 4.0 us + log2(nodes) * 14 us)
//   PAT (all-gather, reduce-scatter, one GPU per node only): 8.0 us + log2(nodes) * 14/3.5 us + n * 2.8 us
// taking the least of those that apply, as NCCL does by their time (NCCL also weighs their bandwidths, which this
// leaves out: PAT's is 0.75 of the ring's). A ring's latency grows with every rank it adds: over thousands of ranks a
// collective waits milliseconds before its first byte counts, which is why frameworks cut fewer, larger buckets at
// scale (data_parallel_collectives).
enum class Collective { all_gather, reduce_scatter, allreduce };
double collective_latency_seconds(Collective collective, int ranks, int nodes);

// A pipeline stage's send to its neighbour waits a latency of its own too. NCCL's tuning models collectives only;
// a send is counted as one step of a ring of the two ranks, collective_latency_seconds(all_gather, 2, nodes): 11.8 us
// within a node, 17.6 us across two (PAT's, the least).
double send_latency_seconds(int nodes);

// Off NCCL these models do not hold. Gloo over TCP between CPU ranks waits milliseconds where NCCL waits
// microseconds: each message passes between threads (the caller, the communicator's thread, Gloo's event loop), and a
// thread woken on a core that a rank keeps computing waits for the scheduler's next tick. Measured on 2 cores with 2
// ranks of dtrain-trainer --tp 2 (scripts/bench/plan_vs_measured.py's model): the same bytes in 21, 81 and 161
// collectives a step (1, 4 and 8 micro-batches) cost 1.9 ms of exposed time for each collective added, and
// `dtrain bench allreduce -b 4K -e 4K --busy-ms 10` took 0.9-2.2 ms (back to back, without --busy-ms, 4 ms: a whole
// tick at CONFIG_HZ=250 each). --collective-latency-us gives that measured time (a small message's time is its
// latency, as nccl-tests' small sizes read), and every collective and every send then waits it instead.

// How many data-parallel collectives one GPU starts in an optimizer step of k micro-steps, P its parameters, L its
// layers: stages 0-2 reduce in buckets of Megatron-LM's size, max(40M, 1M * dp) parameters
// (megatron/core/distributed/distributed_data_parallel.py, core_v0.12.0: "larger DP sizes need larger buckets"):
// B = ceil(P / bucket) of them, each an allreduce (stage 0), a reduce-scatter and an all-gather (stage 1), k
// reduce-scatters and an all-gather (stage 2); stage 3 gathers and reduces layer by layer (FSDP's unit, a
// transformer block): 3 * k * L (two all-gathers and a reduce-scatter per layer per micro-step). bucket_params > 0
// sets the buckets instead (--ddp-bucket-mb).
double data_parallel_collectives(int stage, double params, int dp, int micro_steps, int layers,
                                 double bucket_params = 0);

// Bytes one GPU sends for data parallelism in one optimizer step of k micro-steps, P the parameters a data-parallel
// rank replicates (P / (t*p) with model parallelism). ZeRO paper Sec. 7: DDP and stages 1-2 move 2P values, stage 3
// 3P; with gradient accumulation:
//   stage 0: one allreduce of the gradients after the last micro-step (no_sync before it): 2P
//   stage 1: one reduce-scatter of the gradients and one all-gather of the updated parameters: 2P
//   stage 2: a reduce-scatter every micro-step (only the shard is kept) and the all-gather: (k + 1)P
//   stage 3: per micro-step an all-gather for forward, one for backward, and a reduce-scatter: 3kP
// each times (N - 1)/N (ring), at value_bytes (the paper's fp16 gradients and parameters; fp32 otherwise).
double data_parallel_bytes(int stage, double params, int dp, int micro_steps, Precision precision);

// Megatron tensor parallelism (Shoeybi et al., arXiv:1909.08053, Sec. 3 and Fig. 4): every layer allreduces its
// s*b*h activations over the t ranks twice in forward (g, after attention and after the MLP) and twice in backward
// (f, before them): 4 per layer per micro-batch. Full recomputation runs each layer's forward again before its
// backward, its two allreduces with it: 6 (Megatron-LM's CheckpointFunction reruns the layer's forward,
// megatron/core/tensor_parallel/random.py, core_v0.12.0; dtrain-trainer's Gpt::backward_block calls forward_block).
// The vocabulary-parallel embedding allreduces its output in forward and the column-parallel output layer its input
// gradient in backward (Shoeybi et al. Sec. 3: both embedding matrices split along the vocabulary; dtrain-trainer's
// Gpt::embed and head_backward), each an allreduce of s*b*h: with one stage both are on every GPU,
// with p stages one on the first and one on the last, and the first (ceil(L/p) layers, the most) is counted. The
// cross-entropy's collectives of s*b values (the row maxima and sums) are 1/h of these and left out.
// tensor_parallel_allreduces: the allreduces of s*b*h one GPU of the most loaded stage runs per micro-batch.
double tensor_parallel_allreduces(int layers_per_stage, int pp, Recompute recompute = Recompute::none);
// The collectives a GPU of the busiest stage starts per micro-batch, for their latencies: small ones count as much as
// large ones there. Those of tensor_parallel_allreduces for the stage's layers, its embedding's (first stage) or its
// head's (last stage), and on the last stage the vocabulary-parallel cross-entropy's kCrossEntropyCollectives; the
// larger of the first and the last stage's. With one stage, all of them.
inline constexpr int kCrossEntropyCollectives = 2;  // dtrain-trainer: the row maxima's all-gather and one allreduce
                                                    // of the sums and the targets' logits (vocab_parallel.cpp)
double tensor_parallel_collectives(int layers, int pp, Recompute recompute = Recompute::none);
// Bytes one GPU sends for them in a step of micro_steps micro-batches: each a ring allreduce of s*b*h values.
double tensor_parallel_bytes(const Shape& shape, int tp, double allreduces_per_micro_batch, int micro_steps,
                             Precision precision);

// With p > 1 stages and the embedding tied to the output layer (GPT), the first stage's embedding and the last
// stage's copy of it sum their gradients once a step, so the two copies stay equal: an allreduce of V*h/t values
// between the two (Megatron-LM's _allreduce_word_embedding_grads, megatron/core/distributed/
// finalize_model_grads.py, core_v0.12.0: "Reduce grads across first and last stages to ensure that word_embeddings
// parameters stay in sync"; dtrain-trainer's Training::sum_tied), at the gradients' value_bytes. 0 without the
// vocabulary, with one stage or with an untied output layer.
double tied_embedding_bytes(const Shape& shape, int tp, int pp, Precision precision);

// The slowest stage's compute over the mean stage's: the pipeline runs at its pace. Each of the L layers costs the
// same (the 6P of its parameters and attention's 12hs per token: model_flops_per_token, times recomputation's
// factor); the last stage also runs the output layer, 6*V*h per token (its V x h matrix; not recomputed), the first
// stage's embedding lookup none. Stages hold ceil(L/p) layers but the last, which holds the rest (stage_layers).
// p * max(stage) / sum(stages): 1 with one stage; ceil(L/p) * p / L without the vocabulary.
double stage_imbalance(double params, const Shape& shape, int pp, Recompute recompute = Recompute::none);

// Pipeline parallelism: each micro-batch's s*b*h activations go to the next stage and their gradient comes back,
// so a middle stage sends 2*s*b*h values per micro-batch (Narayanan et al. Sec. 2.2; 0 for one stage); v times that
// with v interleaved stages (Sec. 2.2.2: "the amount of communication also increases by v"). With sequence
// parallelism each of the t tensor-parallel ranks holds and sends s/t of the tokens (sequence_shards = t: Megatron-LM's
// get_tensor_shapes divides seq_length by the tensor-parallel size, megatron/core/pipeline_parallel/schedules.py,
// core_v0.12.0; dtrain-trainer's Gpt::stage_floats).
double pipeline_bytes(const Shape& shape, int pp, int micro_steps, Precision precision, int virtual_stages = 1,
                      int sequence_shards = 1);
// The sends of pipeline_bytes: a middle stage's 2 per micro-batch (activations on, their gradient back), v times
// with v interleaved stages; 0 for one stage. Each waits a send's latency (send_latency_seconds).
double pipeline_sends(int pp, int micro_steps, int virtual_stages = 1);

// Gradient accumulation: a step's global batch is micro-batch * dp * micro-steps; the fewest micro-steps that reach
// the wanted global batch (the batch then reached, which is larger when dp * micro-batch does not divide it).
struct Accumulation {
  long long micro_steps = 1;
  long long global_batch = 0;  // sequences per optimizer step
  bool exact = true;           // global_batch is the one wanted
};
Accumulation accumulation(long long wanted_global_batch, int micro_batch, int dp);

// The optimizer step: AdamW is elementwise and memory-bound (its arithmetic intensity, a few FLOPs per 28 bytes, is
// far below any GPU's ridge point: Williams et al., "Roofline", CACM 2009), so it takes the bytes it moves over the
// GPU's memory bandwidth. Per parameter of the shard a rank updates (its P at ZeRO 0, P/N from stage 1 on): read the
// gradient (2), the fp32 master weight, momentum and variance (12), write the three (12) and the 16-bit working copy
// (2): kAdamBytesPerParam. (fp32: a 4-byte gradient and no copy, the same 28.)
inline constexpr double kAdamBytesPerParam = 28;
double optimizer_seconds(double shard_params, double memory_bw);

// What must stay free: the CUDA context, NCCL's buffers, the allocator's fragmentation and temporary workspaces are
// not in the estimates above; 10% of the GPU's memory is the margin the issue sets for them.
inline constexpr double kHeadroom = 0.10;
// bytes fit when they take at most (1 - kHeadroom) of the GPU's memory.
bool fits(double bytes, double gpu_memory);

// Forward and backward cost 6 FLOPs per parameter per token (Kaplan et al., arXiv:2001.08361, Sec. 2.1):
// 6 * P * tokens / flops_per_s seconds on one GPU.
double compute_seconds(double params, double tokens, double flops_per_s);

// Of those 6 FLOPs, forward is 2 and backward 4 (Kaplan Sec. 2.1: backward costs twice forward), so backward is 2/3
// of a step's compute. Gradient reductions can only run during backward: before it there is no gradient.
inline constexpr double kBackwardShare = 2.0 / 3.0;

// DDP's gradient buckets (PyTorch DistributedDataParallel, Li et al., arXiv:2006.15704, Sec. 3.2.3) are cut as
// dtrain-trainer's DdpReducer cuts them, by the same functions (trainer/parallel/ddp/buckets.h): from the end of the
// gradient buffer (the last layers, whose gradients backward produces first), a first bucket of 1 MiB, then buckets
// of --ddp-bucket-mb, by default min(25 MiB, max(1 MiB, gradient bytes / 8)). A bucket's allreduce starts once
// backward has produced all of it, so the last one (the embeddings', which backward finishes last) starts only when
// backward has ended: last_bucket_bytes gives its size.
using trainer::default_bucket_bytes;
using trainer::kFirstBucketBytes;
using trainer::kMaxBucketBytes;
using trainer::last_bucket_bytes;

// The data-parallel communication a step still waits for when it overlaps compute as DDP, ZeRO and FSDP do,
// comm_s being all of it and compute_s the step's compute (k micro-steps):
//   stage 0: the buckets' allreduces, but the last, run during the last micro-step's backward (earlier micro-steps
//            do not synchronise); the last bucket's (last_bucket_share of the bytes) starts when backward has ended:
//            last + max(0, comm - last - backward / k)
//   stage 1: the reduce-scatter (half the bytes) as stage 0's allreduces, without the last-bucket term (a
//            framework's unit of reduction is not known here, so this is optimistic by the last unit's transfer);
//            the all-gather of the updated parameters follows the optimizer step, which needs every reduced
//            gradient, so nothing hides it: all-gather + max(0, reduce-scatter - backward / k)
//   stage 2: a reduce-scatter every micro-step (k of the k + 1 collectives), each behind its own micro-step's
//            backward; the all-gather as stage 1: all-gather + max(0, reduce-scatters - backward)
//   stage 3: the all-gathers are prefetched a unit ahead through forward and backward, the reduce-scatters run in
//            backward: all of compute can hide them: max(0, comm - compute)
// Checked against dtrain-trainer on tc-limited links (BENCHMARKS.md, "dtrain plan against measured scaling").
double exposed_data_parallel_seconds(int stage, double comm_s, double compute_s, int micro_steps,
                                     double last_bucket_share);

}  // namespace dtrain::plan

#pragma once

// What `dtrain plan` is asked: the command line as given (PlanArgs) checked into a model, a cluster and the
// options of the search (PlanRequest). Every refusal names the flag, the value and what to give instead.

#include <optional>
#include <string>

#include "cli/plan/costs/formulas.h"
#include "common/status.h"
#include "trainer/model/config.h"

namespace dtrain::plan {

// What the user says limits the run today; it orders the strategies that fit (advisor.h).
enum class Bottleneck { speed, memory, communication };
const char* bottleneck_name(Bottleneck bottleneck);

// The framework the job runs on, which limits the layouts the search offers and sets the memory accounting
// (advisor.h, runs_on):
//   any        every layout the search has (the ZeRO paper's accounting)
//   megatron   Megatron-LM: ZeRO 0 (DDP) or 1 (--use-distributed-optimizer), TP with or without sequence
//              parallelism, PP with interleaving; its own bytes per parameter (formulas.h, megatron_model_states)
//   deepspeed  DeepSpeed without Megatron: no tensor parallelism, ZeRO 0-3, its pipeline engine (no interleaving)
//              with ZeRO 0-1 only, whole-layer activation checkpointing (no selective recomputation)
enum class Framework { any, megatron, deepspeed };
const char* framework_name(Framework framework);

struct Cluster {
  std::string gpu;                      // the --gpu preset, "" when none was given
  std::optional<double> peak_flops;     // the preset's dense bf16/fp16 peak per GPU (for the share of peak)
  int gpus = 0;
  int gpus_per_node = 0;
  double gpu_memory = 0;                // bytes per GPU
  std::optional<double> intra_node_bw;  // bytes/s per GPU within a node (busbw of `dtrain bench allreduce`)
  std::optional<double> inter_node_bw;  // bytes/s per GPU across nodes (the same, measured across nodes)
  std::optional<double> gpu_flops;      // achieved FLOP/s per GPU, for compute time and scaling
  std::optional<double> memory_bw;      // bytes/s of a GPU's own memory (--gpu's, or --memory-bw): the optimizer step
  // Seconds every collective and every pipeline send waits before its bytes count, measured on the job's ranks
  // (--collective-latency-us, `dtrain bench ... --busy-ms`); unset: NCCL's model (formulas.h,
  // collective_latency_seconds and send_latency_seconds).
  std::optional<double> collective_latency;
  int nodes() const { return (gpus + gpus_per_node - 1) / gpus_per_node; }
};

struct Workload {
  double params = 0;                           // P
  Precision precision = Precision::bf16;
  int micro_batch = 1;                         // b, sequences per GPU per micro-step
  bool micro_batch_given = false;              // --micro-batch given; else the search tries 1, 2, 4, 8
  std::optional<Shape> shape;                  // the layer shape, when known (activations, TP, PP)
  std::optional<long long> global_batch;       // sequences per optimizer step
  std::optional<trainer::GptConfig> trainer;   // dtrain-trainer's model, when it is one (preset or shape + vocab)
  std::string model_name;                      // the preset, or "" for a size or shape
  // DDP's gradient buckets after the first (--ddp-bucket-mb); unset: the trainer's default rule for the gradient
  // (formulas.h, default_bucket_bytes).
  std::optional<double> bucket_bytes;
};

struct PlanRequest {
  Workload workload;
  Cluster cluster;
  std::optional<int> tp;  // fixed by --tp, else searched
  std::optional<int> pp;  // fixed by --pp, else searched
  std::optional<int> pp_virtual;  // fixed by --pp-virtual (with --pp), else 1 with --pp and searched without
  std::optional<int> zero;              // the ZeRO stage, fixed by --zero, else searched
  std::optional<Recompute> recompute;   // fixed by --recompute, else searched
  bool sequence_parallel = true;        // --sequence-parallel off: TP layouts without it
  Framework framework = Framework::any;
  Bottleneck bottleneck = Bottleneck::speed;
  bool trainer_accounting = false;
};

// The command line; an unset optional was not given.
struct PlanArgs {
  std::optional<double> params;
  std::optional<std::string> model;
  std::optional<int> gpus;
  std::optional<int> gpus_per_node;
  std::optional<std::string> gpu;  // --gpu: a preset (gpus.h) whose values the other flags override
  std::string gpu_memory;           // "": the --gpu preset's, else 80GB
  std::string precision = "bf16";
  std::optional<int> layers, hidden, heads, seq_len, vocab;
  std::optional<int> micro_batch;
  std::optional<long long> global_batch;
  std::optional<double> intra_node_bw_gbs, inter_node_bw_gbs, memory_bw_gbs;  // GB/s
  std::optional<double> gpu_tflops;
  std::optional<double> collective_latency_us;  // --collective-latency-us: microseconds
  std::optional<double> ddp_bucket_mb;  // MiB
  std::optional<int> tp, pp;
  std::optional<int> pp_virtual;        // --pp-virtual V: interleaved 1F1B with V model chunks a stage (needs --pp)
  std::optional<int> zero;              // --zero 0..3
  std::optional<int> kv_heads;          // --kv-heads (grouped-query attention)
  std::optional<int> ffn;               // --ffn: the MLP's inner size (default 4 x --hidden)
  std::string mlp = "gelu";             // --mlp gelu|swiglu
  std::string recompute;                // --recompute none|selective|full; "": searched
  std::string sequence_parallel = "on";  // --sequence-parallel on|off
  std::string attention = "flash";      // --attention flash|eager
  std::string framework = "any";        // --framework any|megatron|deepspeed
  std::string bottleneck = "speed";
  bool trainer_accounting = false;
};

// Checks the arguments. Failures are invalid_argument with a message for the user (the command exits 2).
Result<PlanRequest> make_request(const PlanArgs& args);

}  // namespace dtrain::plan

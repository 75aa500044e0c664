#include "cli/plan/request.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "cli/plan/costs/formulas.h"
#include "cli/plan/costs/gpus.h"
#include "cli/plan/presets.h"
#include "cli/plan/trainer_model.h"
#include "cli/plan/costs/units.h"
#include "trainer/parallel/pipeline/schedule.h"

namespace dtrain::plan {
namespace {

// Bounds that keep every product below in range of a double's exact integers and a search short; far above any
// real model or cluster.
constexpr long long kMaxGpus = 1 << 20;
constexpr long long kMaxGpusPerNode = 1024;
constexpr long long kMaxDimension = 10'000'000;  // layers, hidden, heads, sequence, vocabulary, micro-batch
constexpr double kMaxParams = 1e16;
// Bandwidths (GB/s), TFLOP/s and bucket sizes (MiB) from 1e-3 to 1e6: 1 MB/s to 1 PB/s, 1 GFLOP/s to 1 EFLOP/s, 1 KiB
// to 1 TiB, far outside any real value on both sides.
constexpr double kMinRate = 1e-3;
constexpr double kMaxRate = 1e6;

Status refuse(std::string message) { return {StatusCode::invalid_argument, std::move(message)}; }

// 7.5e+09, 0, -1, nan: as short as the user would write it.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

template <class T>
Status check_range(const std::optional<T>& value, const char* flag, long long max) {
  if (!value) return {};
  if (*value < 1 || *value > max)
    return refuse(std::string(flag) + " " + std::to_string(*value) + ": must be a whole number from 1 to " +
                  std::to_string(max));
  return {};
}

// A real quantity: from `min` (above zero: 1e-300 GB/s would print nonsense times) to `max` (past it a product
// overflows or the printed numbers mean nothing).
Status check_between(const std::optional<double>& value, const char* flag, double min, double max,
                     const char* example) {
  if (value && !(*value >= min && *value <= max))
    return refuse(std::string(flag) + " " + number(*value) + ": must be a number from " + number(min) + " to " +
                  number(max) + ", e.g. " + flag + " " + example);
  return {};
}

Status check_numbers(const PlanArgs& a) {
  for (const auto& [value, flag] : {std::pair{a.layers, "--layers"}, {a.hidden, "--hidden"}, {a.heads, "--heads"},
                                    {a.seq_len, "--seq-len"}, {a.vocab, "--vocab"}, {a.micro_batch, "--micro-batch"},
                                    {a.tp, "--tp"}, {a.pp, "--pp"}, {a.pp_virtual, "--pp-virtual"},
                                    {a.kv_heads, "--kv-heads"},
                                    {a.ffn, "--ffn"}}) {
    if (Status s = check_range(value, flag, kMaxDimension); !s.ok()) return s;
  }
  if (Status s = check_range(a.gpus, "--gpus", kMaxGpus); !s.ok()) return s;
  if (Status s = check_range(a.gpus_per_node, "--gpus-per-node", kMaxGpusPerNode); !s.ok()) return s;
  if (Status s = check_range(a.global_batch, "--global-batch", 1'000'000'000'000LL); !s.ok()) return s;
  if (Status s = check_between(a.params, "--params", 1, kMaxParams, "7.5e9"); !s.ok()) return s;
  if (Status s = check_between(a.intra_node_bw_gbs, "--intra-node-bw", kMinRate, kMaxRate, "200 (GB/s)"); !s.ok())
    return s;
  if (Status s = check_between(a.inter_node_bw_gbs, "--inter-node-bw", kMinRate, kMaxRate, "25 (GB/s)"); !s.ok())
    return s;
  if (Status s = check_between(a.memory_bw_gbs, "--memory-bw", kMinRate, kMaxRate, "2039 (GB/s)"); !s.ok()) return s;
  if (Status s = check_between(a.ddp_bucket_mb, "--ddp-bucket-mb", kMinRate, kMaxRate, "25 (MiB)"); !s.ok()) return s;
  // 1 ns to 1000 s: far outside any real latency on both sides.
  if (Status s = check_between(a.collective_latency_us, "--collective-latency-us", kMinRate, 1e9, "2000 (us)");
      !s.ok())
    return s;
  return check_between(a.gpu_tflops, "--gpu-tflops", kMinRate, kMaxRate, "400");
}

// dtrain-trainer's model from a whole shape with --vocab (positions = --seq-len); a preset's is in presets.h.
std::optional<trainer::GptConfig> shape_trainer_config(const PlanArgs& a) {
  if (!a.vocab || a.params || !a.layers || !a.hidden || !a.heads || !a.seq_len) return std::nullopt;
  return trainer::GptConfig{*a.seq_len, *a.vocab, trainer::GptConfig::pad_vocab(*a.vocab), *a.layers, *a.heads,
                            *a.hidden};
}

Status check_shape_flags(const PlanArgs& a) {
  const bool any = a.layers || a.hidden || a.heads;
  if (a.model && (any || a.vocab || a.kv_heads || a.ffn || a.mlp != "gelu"))
    return refuse("--model " + *a.model + " already gives the shape; drop --layers/--hidden/--heads/--kv-heads/"
                  "--ffn/--mlp/--vocab, or drop --model and give the whole shape");
  if (a.model && a.params)
    return refuse("--params and --model both give the model's size; give one of them");
  if (a.vocab && a.params && !a.layers)
    return refuse("--vocab with --params places the embedding on the pipeline's first and last stages, which needs "
                  "the shape: add --layers --hidden --heads --seq-len");
  if (a.kv_heads && (!a.heads || *a.heads % *a.kv_heads != 0))
    return refuse("--kv-heads " + std::to_string(*a.kv_heads) + " must divide --heads" +
                  (a.heads ? " " + std::to_string(*a.heads) : std::string(" (give the shape)")) +
                  ": each key/value head serves a whole group of query heads");
  if (any && !(a.layers && a.hidden && a.heads && a.seq_len))
    return refuse("the shape is incomplete: --layers, --hidden, --heads and --seq-len go together (missing " +
                  std::string(!a.layers ? "--layers" : !a.hidden ? "--hidden" : !a.heads ? "--heads" : "--seq-len") +
                  ")");
  if (a.hidden && a.heads && *a.hidden % *a.heads != 0)
    return refuse("--hidden " + std::to_string(*a.hidden) + " is not a multiple of --heads " +
                  std::to_string(*a.heads) + "; the head size is hidden / heads");
  if (!a.params && !a.model && !(any && a.vocab))
    return refuse("give the model's size: --params 7.5e9, or --model NAME (" + preset_names() +
                  "), or the shape --layers --hidden --heads --seq-len with --vocab");
  return {};
}

Result<Workload> finish_workload(const PlanArgs& a, Workload w) {
  if (a.attention != "flash" && a.attention != "eager")
    return {refuse("--attention " + a.attention + ": use flash (fused attention, no s x s scores kept) or eager")};
  if (w.shape) w.shape->flash_attention = a.attention == "flash";
  if (a.mlp != "gelu" && a.mlp != "swiglu")
    return {refuse("--mlp " + a.mlp + ": use gelu (GPT's MLP) or swiglu (Llama's gate, up and down matrices)")};
  if (w.shape && (a.ffn || a.mlp == "swiglu")) {
    w.shape->ffn = a.ffn.value_or(0);
    w.shape->gated_mlp = a.mlp == "swiglu";
  }
  return {{}, w};
}

Result<Workload> make_workload(const PlanArgs& a) {
  if (Status s = check_shape_flags(a); !s.ok()) return {s};
  Workload w;
  if (a.precision == "fp32") w.precision = Precision::fp32;
  else if (a.precision == "bf16") w.precision = Precision::bf16;
  else if (a.precision == "fp16") w.precision = Precision::fp16;
  else return {refuse("--precision " + a.precision + ": use bf16, fp16 or fp32")};
  w.micro_batch = a.micro_batch.value_or(1);
  w.micro_batch_given = a.micro_batch.has_value();
  w.global_batch = a.global_batch;
  if (a.ddp_bucket_mb) w.bucket_bytes = *a.ddp_bucket_mb * 1024 * 1024;
  w.model_name = a.model.value_or("");
  if (a.model) {
    const ModelPreset* preset = find_preset(*a.model);
    if (!preset)
      return {refuse("--model: unknown model preset '" + *a.model + "'; known presets: " + preset_names() +
                     " (or give --params, or the shape --layers --hidden --heads --seq-len)")};
    const int seq = a.seq_len.value_or(preset->seq_len);
    if (seq > preset->seq_len)
      return {refuse("--seq-len " + std::to_string(seq) + " is longer than " + *a.model + "'s " +
                     std::to_string(preset->seq_len) + " positions")};
    w.trainer = preset_trainer_config(*preset);
    w.shape = preset_shape(*preset, seq, w.micro_batch);
    w.params = preset_params(*preset);
    return finish_workload(a, w);
  }
  w.trainer = shape_trainer_config(a);
  if (a.layers) {
    w.shape = Shape{*a.layers, *a.hidden, *a.heads, *a.seq_len, w.micro_batch, a.kv_heads.value_or(0),
                    a.vocab.value_or(0)};
  }
  w.params = a.params ? *a.params : static_cast<double>(trainer_params(*w.trainer));
  return finish_workload(a, w);
}

Result<Cluster> make_cluster(const PlanArgs& a) {
  if (!a.gpus) return {refuse("--gpus is required: how many GPUs the job gets, e.g. --gpus 64")};
  Cluster c;
  const GpuPreset* gpu = a.gpu ? find_gpu(*a.gpu) : nullptr;
  if (a.gpu && gpu == nullptr) return {refuse("--gpu " + *a.gpu + ": not a GPU dtrain plan knows; known: " + gpu_names() +
                                              " (or give --gpu-memory, --intra-node-bw, --inter-node-bw, --gpu-tflops)")};
  c.gpus = *a.gpus;
  c.gpus_per_node = a.gpus_per_node.value_or(std::min(gpu ? gpu->gpus_per_node : 8, c.gpus));
  if (c.gpus > c.gpus_per_node && c.gpus % c.gpus_per_node != 0)
    return {refuse("--gpus " + std::to_string(c.gpus) + " is not a whole number of nodes of --gpus-per-node " +
                   std::to_string(c.gpus_per_node))};
  c.gpus_per_node = std::min(c.gpus_per_node, c.gpus);
  c.gpu_memory = gpu ? gpu->memory : 80e9;
  if (!a.gpu_memory.empty()) {
    auto memory = parse_bytes(a.gpu_memory);
    if (!memory.ok()) return {refuse("--gpu-memory " + memory.status.message())};
    c.gpu_memory = memory.value;
  }
  if (gpu) {
    c.gpu = gpu->name;
    c.peak_flops = gpu->peak_flops;
    c.intra_node_bw = gpu->intra_node_bw;
    c.inter_node_bw = gpu->inter_node_bw;
    c.gpu_flops = gpu->peak_flops * kAchievedShareOfPeak;
    c.memory_bw = gpu->memory_bw;
  }
  if (a.memory_bw_gbs) c.memory_bw = *a.memory_bw_gbs * 1e9;
  if (a.intra_node_bw_gbs) c.intra_node_bw = *a.intra_node_bw_gbs * 1e9;
  if (a.inter_node_bw_gbs) c.inter_node_bw = *a.inter_node_bw_gbs * 1e9;
  if (a.gpu_tflops) c.gpu_flops = *a.gpu_tflops * 1e12;
  if (a.collective_latency_us) c.collective_latency = *a.collective_latency_us * 1e-6;
  return {{}, c};
}

// --pp-virtual V: with --pp above 1 and the layer shape, and dtrain-trainer's (and Megatron's) rules for the
// interleaved schedule: P x V dividing the layers, the micro-batches a multiple of P (trainer::check_interleaving).
Status check_interleaved(const PlanArgs& a, const Workload& w, const Cluster& c) {
  if (!a.pp_virtual) return {};
  const int pp = a.pp.value_or(1), v = *a.pp_virtual;
  if (pp < 2)
    return refuse("--pp-virtual " + std::to_string(v) + " interleaves the chunks of a pipeline: give --pp 2 or more");
  if (a.framework == "deepspeed" && v > 1)
    return refuse("--pp-virtual with --framework deepspeed: DeepSpeed's pipeline has no interleaved schedule; drop "
                  "--pp-virtual, or use --framework megatron or any");
  if (v == 1 || !w.shape) return {};
  const int dp = c.gpus / (a.tp.value_or(1) * pp);
  const long long steps = w.global_batch ? accumulation(*w.global_batch, w.micro_batch, dp).micro_steps : 1;
  try {
    trainer::check_interleaving(w.shape->layers, pp, v, static_cast<int>(std::min<long long>(steps, 1 << 30)));
  } catch (const std::invalid_argument& error) {
    return refuse(std::string(error.what()) + (w.global_batch ? "" : " (without --global-batch, 1 micro-batch)"));
  }
  return {};
}

Status check_parallel(const PlanArgs& a, const Workload& w, const Cluster& c) {
  const int tp = a.tp.value_or(1), pp = a.pp.value_or(1);
  if (a.tp && tp > c.gpus_per_node)
    return refuse("--tp " + std::to_string(tp) + " is more than the " + std::to_string(c.gpus_per_node) +
                  " GPUs of a node: tensor parallelism allreduces every layer and stays within a node; use --pp "
                  "across nodes");
  if (a.tp && w.shape && w.shape->heads % tp != 0)
    return refuse("--tp " + std::to_string(tp) + " does not divide the " + std::to_string(w.shape->heads) +
                  " attention heads; Megatron splits whole heads: pick a divisor of the heads");
  if (a.tp && w.shape && w.shape->kv_heads && w.shape->kv_heads % tp != 0)
    return refuse("--tp " + std::to_string(tp) + " does not divide the " + std::to_string(w.shape->kv_heads) +
                  " key/value heads (grouped-query attention); Megatron splits whole query groups: pick a divisor "
                  "of them");
  if (a.pp && w.shape && !splits_layers(w.shape->layers, pp))
    return refuse("--pp " + std::to_string(pp) + " cannot split the " + std::to_string(w.shape->layers) +
                  " layers: with ceil(layers / stages) on each stage but the last, the last would hold none; pick "
                  "fewer stages (a divisor of the layers splits them evenly)");
  if (c.gpus % (tp * pp) != 0)
    return refuse("--tp " + std::to_string(tp) + " x --pp " + std::to_string(pp) + " = " + std::to_string(tp * pp) +
                  " does not divide --gpus " + std::to_string(c.gpus) + "; the rest of the GPUs are data-parallel");
  if ((a.tp || a.pp) && !w.shape && (tp > 1 || pp > 1))
    return refuse("--tp and --pp need the layer shape (--model, or --layers --hidden --heads --seq-len)");
  if (Status s = check_interleaved(a, w, c); !s.ok()) return s;
  if (a.trainer_accounting && !w.trainer)
    return refuse("--trainer-accounting needs dtrain-trainer's model, a GPT-2: --model tiny, gpt2-124m, gpt2-355m, "
                  "gpt2-774m or gpt2-1.5b, or --layers --hidden --heads --seq-len with --vocab");
  return {};
}

// --framework, --zero, --recompute and --sequence-parallel: what the search may choose.
Status set_search_options(const PlanArgs& a, PlanRequest& r) {
  if (a.framework == "any") r.framework = Framework::any;
  else if (a.framework == "megatron") r.framework = Framework::megatron;
  else if (a.framework == "deepspeed") r.framework = Framework::deepspeed;
  else return refuse("--framework " + a.framework + ": use any, megatron or deepspeed");
  if (a.zero && (*a.zero < 0 || *a.zero > 3)) return refuse("--zero " + std::to_string(*a.zero) + ": use 0, 1, 2 or 3");
  r.zero = a.zero;
  if (a.recompute == "none") r.recompute = Recompute::none;
  else if (a.recompute == "selective") r.recompute = Recompute::selective;
  else if (a.recompute == "full") r.recompute = Recompute::full;
  else if (!a.recompute.empty()) return refuse("--recompute " + a.recompute + ": use none, selective or full");
  if (a.sequence_parallel != "on" && a.sequence_parallel != "off")
    return refuse("--sequence-parallel " + a.sequence_parallel + ": use on or off");
  r.sequence_parallel = a.sequence_parallel == "on";
  if (r.framework == Framework::megatron && r.zero && *r.zero > 1)
    return refuse("--zero " + std::to_string(*r.zero) + " with --framework megatron: Megatron-LM shards the optimizer "
                  "state (--zero 1, its distributed optimizer) and no more; use --zero 0 or 1, or --framework any");
  if (r.framework == Framework::deepspeed && a.tp.value_or(1) > 1)
    return refuse("--tp with --framework deepspeed: DeepSpeed alone has no tensor parallelism (Megatron-DeepSpeed "
                  "has); drop --tp, or use --framework megatron or any");
  if (r.framework == Framework::deepspeed && r.recompute == Recompute::selective)
    return refuse("--recompute selective with --framework deepspeed: DeepSpeed checkpoints whole layers; use none "
                  "or full");
  if (r.zero && *r.zero > 1 && a.pp.value_or(1) > 1)
    return refuse("--zero " + std::to_string(*r.zero) + " with --pp: stages 2 and 3 reduce-scatter or gather every "
                  "micro-batch, which a pipeline multiplies (DeepSpeed refuses them with its pipeline); use --zero 0 "
                  "or 1");
  return {};
}

}  // namespace

const char* framework_name(Framework framework) {
  switch (framework) {
    case Framework::any: return "any";
    case Framework::megatron: return "megatron";
    case Framework::deepspeed: return "deepspeed";
  }
  return "?";
}

const char* bottleneck_name(Bottleneck bottleneck) {
  switch (bottleneck) {
    case Bottleneck::speed: return "speed";
    case Bottleneck::memory: return "memory";
    case Bottleneck::communication: return "communication";
  }
  return "?";
}

Result<PlanRequest> make_request(const PlanArgs& args) {
  if (Status s = check_numbers(args); !s.ok()) return {s};
  auto workload = make_workload(args);
  if (!workload.ok()) return {workload.status};
  auto cluster = make_cluster(args);
  if (!cluster.ok()) return {cluster.status};
  if (Status s = check_parallel(args, workload.value, cluster.value); !s.ok()) return {s};
  PlanRequest r;
  r.workload = workload.value;
  r.cluster = cluster.value;
  r.tp = args.tp;
  r.pp = args.pp;
  r.pp_virtual = args.pp_virtual;
  r.trainer_accounting = args.trainer_accounting;
  if (Status s = set_search_options(args, r); !s.ok()) return {s};
  if (args.bottleneck == "speed") r.bottleneck = Bottleneck::speed;
  else if (args.bottleneck == "memory") r.bottleneck = Bottleneck::memory;
  else if (args.bottleneck == "communication") r.bottleneck = Bottleneck::communication;
  else return {refuse("--bottleneck " + args.bottleneck + ": use memory, speed or communication")};
  return {{}, r};
}

}  // namespace dtrain::plan

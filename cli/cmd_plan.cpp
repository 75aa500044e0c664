// `dtrain plan`: which parallel strategy fits a model on a set of GPUs, what it costs in memory and communication,
// and the dtrain-trainer flags and job-spec lines that run it (README "dtrain plan"; the formulas and their sources
// are in cli/plan/costs/formulas.h).

#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

#include "cli/commands.h"
#include "cli/plan/costs/gpus.h"
#include "cli/plan/measured/measured_run.h"
#include "cli/plan/presets.h"
#include "cli/plan/recommend.h"
#include "cli/plan/render.h"
#include "cli/plan/request.h"
#include "cli/plan/costs/units.h"

namespace dtrain::cli {
namespace {

// CLI11 binds plain values; an option the user did not give stays unset in PlanArgs.
template <class T>
struct Given {
  T value{};
  CLI::Option* option = nullptr;
  std::optional<T> get() const { return option->count() ? std::optional<T>(value) : std::nullopt; }
};

struct Flags {
  Given<double> params, intra_bw, inter_bw, memory_bw, tflops, bucket_mb, latency_us;
  Given<std::string> model, gpu;
  Given<int> gpus, gpus_per_node, layers, hidden, heads, kv_heads, ffn, seq_len, vocab, micro_batch, tp, pp, zero,
      pp_virtual;
  Given<long long> global_batch;
  plan::PlanArgs args;
  bool json = false;
};

// CLI11 reads a whole number as C does ("0x10" is 16, "010" is 8) and a real one from "inf" or a hex float: a plan's
// numbers are decimal, as people write sizes. A sign is left to the range checks of plan/request.cpp, which say
// what the flag takes.
std::string decimal_only(std::string& text) {
  std::size_t used = 0;
  const std::size_t sign = !text.empty() && text[0] == '-' ? 1 : 0;
  if (plan::parse_decimal(std::string_view(text).substr(sign), used) && sign + used == text.size()) return "";
  return "'" + text + "' is not a decimal number (e.g. 7.5e9)";
}

std::string whole_decimal_only(std::string& text) {
  const std::size_t sign = !text.empty() && text[0] == '-' ? 1 : 0;
  const std::size_t first = text.find_first_not_of('0', sign);
  if (text.size() == sign || text.find_first_not_of("0123456789", sign) != std::string::npos) {
    return "'" + text + "' is not a whole decimal number (e.g. 64)";
  }
  // Leading zeros go, so "010" is ten rather than C's octal eight.
  text.erase(sign, (first == std::string::npos ? text.size() - 1 : first) - sign);
  return "";
}

template <class T>
void add(CLI::App* cmd, Given<T>& given, const char* name, const std::string& help) {
  given.option = cmd->add_option(name, given.value, help);
  if constexpr (std::is_floating_point_v<T>) given.option->transform(CLI::Validator(decimal_only, "DECIMAL"));
  else if constexpr (std::is_integral_v<T>) given.option->transform(CLI::Validator(whole_decimal_only, "DECIMAL"));
}

void add_flags(CLI::App* cmd, Flags& f) {
  add(cmd, f.params, "--params", "parameters, e.g. 7.5e9");
  add(cmd, f.model, "--model",
      "a published model instead of --params: " + plan::preset_names() +
          " (the GPT-2 ones as dtrain-trainer runs them; Llama with grouped-query attention and SwiGLU)");
  add(cmd, f.gpus, "--gpus", "GPUs in all (required)");
  add(cmd, f.gpus_per_node, "--gpus-per-node", "GPUs per node (default 8, or --gpus when fewer)");
  add(cmd, f.gpu, "--gpu",
      "the GPU: " + plan::gpu_names() + " (its memory, peak and the usual system's bandwidths; every flag "
      "overrides them; compute at half the peak without --gpu-tflops)");
  cmd->add_option("--gpu-memory", f.args.gpu_memory,
                  "memory per GPU: 80GB, 141GB, 24GiB (GB = 1e9 bytes; default the --gpu's, else 80GB)");
  cmd->add_option("--precision", f.args.precision, "bf16 | fp16 (mixed precision, fp32 master) | fp32")
      ->capture_default_str();
  add(cmd, f.layers, "--layers", "transformer layers (L)");
  add(cmd, f.hidden, "--hidden", "hidden size (h)");
  add(cmd, f.heads, "--heads", "attention heads (a)");
  add(cmd, f.kv_heads, "--kv-heads", "key/value heads with grouped-query attention (default: as many as --heads)");
  add(cmd, f.ffn, "--ffn", "the MLP's inner size, for its activations (default 4 x --hidden)");
  cmd->add_option("--mlp", f.args.mlp, "gelu (GPT's MLP) | swiglu (Llama's: gate, up, down)")->capture_default_str();
  add(cmd, f.seq_len, "--seq-len", "sequence length (s); with --model, default its longest");
  add(cmd, f.vocab, "--vocab",
      "vocabulary: places the embedding and output layer on the pipeline's first and last stages; with the shape "
      "and no --params, the model is dtrain-trainer's GPT-2 (its exact size)");
  add(cmd, f.micro_batch, "--micro-batch", "sequences per GPU per micro-step (b, default 1)");
  add(cmd, f.global_batch, "--global-batch", "sequences per optimizer step; gradient accumulation reaches it");
  add(cmd, f.intra_bw, "--intra-node-bw", "GB/s per GPU within a node (busbw of `dtrain bench allreduce`)");
  add(cmd, f.inter_bw, "--inter-node-bw", "GB/s per GPU across nodes (busbw of `dtrain bench allreduce`)");
  add(cmd, f.memory_bw, "--memory-bw", "GB/s of a GPU's own memory, for the optimizer step (default the --gpu's)");
  add(cmd, f.tflops, "--gpu-tflops", "achieved TFLOP/s per GPU, for compute time and scaling efficiency");
  add(cmd, f.latency_us, "--collective-latency-us",
      "microseconds each collective and each pipeline send waits, measured on the job's ranks: the small size's "
      "time of `dtrain bench allreduce -b 4K -e 4K --busy-ms 10` (default NCCL's latency model)");
  add(cmd, f.bucket_mb, "--ddp-bucket-mb",
      "DDP's gradient buckets in MiB after the first 1 MiB, for scaling (default dtrain-trainer's rule, "
      "min(25, max(1, gradient MiB / 8)); PyTorch's bucket_cap_mb is 25)");
  add(cmd, f.tp, "--tp", "tensor-parallel size (within a node); default: searched when nothing else fits");
  add(cmd, f.pp, "--pp", "pipeline stages; default: searched when nothing else fits");
  add(cmd, f.pp_virtual, "--pp-virtual",
      "model chunks per pipeline stage, Megatron's interleaved 1F1B (with --pp; P x V must divide the layers and P "
      "the micro-batches); default 1 with --pp, searched (1, 2, 4) without");
  add(cmd, f.zero, "--zero", "the ZeRO stage, 0 (DDP) to 3; default: searched");
  cmd->add_option("--recompute", f.args.recompute, "none | selective | full activation recomputation; default: searched");
  cmd->add_option("--sequence-parallel", f.args.sequence_parallel,
                  "on | off: sequence parallelism beside tensor parallelism")->capture_default_str();
  cmd->add_option("--attention", f.args.attention,
                  "flash (fused: no s x s scores kept) | eager (the scores kept for backward)")->capture_default_str();
  cmd->add_option("--framework", f.args.framework,
                  "any | megatron (ZeRO 0-1, its own bytes per parameter) | deepspeed (no TP; ZeRO 0-1 with PP): the "
                  "layouts the framework runs")->capture_default_str();
  cmd->add_option("--bottleneck", f.args.bottleneck, "memory | speed | communication: how to choose among what fits")
      ->capture_default_str();
  cmd->add_flag("--trainer-accounting", f.args.trainer_accounting,
                "also print what dtrain-trainer holds per rank (its mem_*_bytes metrics)");
  cmd->add_flag("--json", f.json, "print JSON instead of text");
}

void collect(Flags& f) {
  plan::PlanArgs& a = f.args;
  a.params = f.params.get();
  a.model = f.model.get();
  a.gpu = f.gpu.get();
  a.gpus = f.gpus.get();
  a.gpus_per_node = f.gpus_per_node.get();
  a.layers = f.layers.get();
  a.hidden = f.hidden.get();
  a.heads = f.heads.get();
  a.kv_heads = f.kv_heads.get();
  a.ffn = f.ffn.get();
  a.zero = f.zero.get();
  a.seq_len = f.seq_len.get();
  a.vocab = f.vocab.get();
  a.micro_batch = f.micro_batch.get();
  a.global_batch = f.global_batch.get();
  a.intra_node_bw_gbs = f.intra_bw.get();
  a.inter_node_bw_gbs = f.inter_bw.get();
  a.memory_bw_gbs = f.memory_bw.get();
  a.gpu_tflops = f.tflops.get();
  a.collective_latency_us = f.latency_us.get();
  a.ddp_bucket_mb = f.bucket_mb.get();
  a.tp = f.tp.get();
  a.pp = f.pp.get();
  a.pp_virtual = f.pp_virtual.get();
}

// `dtrain plan --from RUN_DIR`: the job's own world is the question, so no other flag but --json goes with it.
int plan_from_run(const CLI::App& cmd, const std::string& dir, bool json) {
  for (const CLI::Option* option : cmd.get_options()) {
    const std::string name = option->get_name();
    if (option->count() > 0 && name != "--from" && name != "--json" && name != "--help") {
      std::fprintf(stderr, "dtrain plan: --from reads the job's own model and GPUs from %s; give it alone (or with "
                           "--json), not with %s\n", dir.c_str(), name.c_str());
      return 2;
    }
  }
  const auto advice = plan::advise_from_run(dir);
  if (!advice.ok()) {
    std::fprintf(stderr, "dtrain plan: %s\n", advice.status.message().c_str());
    return 2;
  }
  const std::string out = json ? plan::render_advice_json(advice.value) : plan::render_advice_text(advice.value);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

Action add_plan_command(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("plan", "which parallel strategy fits a model on these GPUs, and its cost");
  add_flags(cmd, *flags);
  auto from = std::make_shared<std::string>();
  CLI::Option* from_option =
      cmd->add_option("--from", *from, "a job's run directory: its measured step, bottleneck and the remedies, with "
                                       "the lines to change (alone, or with --json)");
  return [flags, from, from_option, cmd]() {
    if (from_option->count() > 0) return plan_from_run(*cmd, *from, flags->json);
    collect(*flags);
    const auto request = plan::make_request(flags->args);
    if (!request.ok()) {
      std::fprintf(stderr, "dtrain plan: %s\n", request.status.message().c_str());
      return 2;
    }
    const plan::PlanReport report = plan::make_report(request.value);
    const std::string out = flags->json ? plan::render_json(report) : plan::render_text(report);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace dtrain::cli

#include "cli/plan/launch_lines.h"

#include <nlohmann/json.hpp>

namespace dtrain::plan {
namespace {

std::string num(long long value) { return std::to_string(value); }

std::vector<std::string> megatron_args(const PlanRequest& r, const Evaluation& c, std::vector<std::string>& notes) {
  const Workload& w = r.workload;
  const Layout& l = c.layout;
  std::vector<std::string> args = {"--tensor-model-parallel-size", num(l.tp), "--pipeline-model-parallel-size",
                                   num(l.pp)};
  if (w.shape && l.pp > 1 && w.shape->layers % l.pp != 0) {
    const int last = w.shape->layers - (l.pp - 1) * stage_layers(w.shape->layers, l.pp);
    args.insert(args.end(), {"--decoder-last-pipeline-num-layers", num(last)});
  }
  if (l.virtual_stages > 1 && w.shape) {
    args.insert(args.end(), {"--num-layers-per-virtual-pipeline-stage",
                             num(w.shape->layers / (l.pp * l.virtual_stages))});
  }
  if (l.sequence_parallel) args.push_back("--sequence-parallel");
  if (l.recompute == Recompute::selective) args.insert(args.end(), {"--recompute-granularity", "selective"});
  if (l.recompute == Recompute::full) {
    args.insert(args.end(), {"--recompute-granularity", "full", "--recompute-method", "uniform",
                             "--recompute-num-layers", "1"});
  }
  args.insert(args.end(), {"--micro-batch-size", num(l.micro_batch), "--global-batch-size",
                           num(c.accumulation.global_batch)});
  if (l.stage >= 1) args.push_back("--use-distributed-optimizer");
  if (l.stage == 3) {
    notes.push_back("ZeRO-3: Megatron-LM's distributed optimizer shards the optimizer state and gradients, not the "
                    "parameters; for ZeRO-3 use torchtitan's FSDP or DeepSpeed stage 3 (below)");
  }
  if (w.precision != Precision::fp32) args.push_back(w.precision == Precision::bf16 ? "--bf16" : "--fp16");
  if (w.shape) {
    const Shape& s = *w.shape;
    args.insert(args.end(), {"--num-layers", num(s.layers), "--hidden-size", num(s.hidden), "--num-attention-heads",
                             num(s.heads), "--seq-length", num(s.seq_len), "--max-position-embeddings",
                             num(s.seq_len)});
    if (s.kv_heads && s.kv_heads != s.heads) {
      args.insert(args.end(), {"--group-query-attention", "--num-query-groups", num(s.kv_heads)});
    }
  }
  return args;
}

std::vector<std::string> torchtitan_toml(const PlanRequest& r, const Evaluation& c, std::vector<std::string>& notes) {
  const Layout& l = c.layout;
  std::vector<std::string> lines = {"[parallelism]"};
  if (l.stage == 0) {
    lines.push_back("data_parallel_replicate_degree = " + num(c.dp));
    lines.push_back("data_parallel_shard_degree = 1");
  } else {
    lines.push_back("data_parallel_shard_degree = " + num(c.dp));
    // Stages 1-2: FSDP keeps the parameters gathered from forward to backward, ZeRO-2's memory for them.
    if (l.stage < 3) {
      lines.push_back("fsdp_reshard_after_forward = \"never\"");
      notes.push_back("torchtitan shards with FSDP; the nearest to ZeRO-" + num(l.stage) + " is FSDP without "
                      "resharding after forward (parameters gathered through the step, optimizer state and gradients "
                      "sharded" + (l.stage == 1 ? std::string(": the gradients too, more than ZeRO-1 shards)") : ")"));
    }
  }
  lines.push_back("tensor_parallel_degree = " + num(l.tp));
  lines.push_back("pipeline_parallel_degree = " + num(l.pp));
  if (l.pp > 1) {
    lines.push_back(std::string("pipeline_parallel_schedule = \"") +
                    (l.virtual_stages > 1 ? "Interleaved1F1B" : "1F1B") + "\"");
  }
  lines.push_back("[activation_checkpoint]");
  lines.push_back(std::string("mode = \"") + recompute_name(l.recompute) + "\"");
  lines.push_back("[training]");
  lines.push_back("local_batch_size = " + num(l.micro_batch));
  lines.push_back("global_batch_size = " + num(c.accumulation.global_batch));
  if (r.workload.shape) lines.push_back("seq_len = " + num(r.workload.shape->seq_len));
  const Precision p = r.workload.precision;
  lines.push_back(std::string("mixed_precision_param = \"") + (p == Precision::fp32 ? "float32" : "bfloat16") + "\"");
  if (p == Precision::fp16) notes.push_back("torchtitan trains in bf16, not fp16 with loss scaling");
  return lines;
}

std::string deepspeed_json(const PlanRequest& r, const Evaluation& c, std::vector<std::string>& notes) {
  nlohmann::json config = {{"train_batch_size", c.accumulation.global_batch},
                           {"train_micro_batch_size_per_gpu", c.layout.micro_batch},
                           {"gradient_accumulation_steps", c.accumulation.micro_steps},
                           {"zero_optimization", {{"stage", c.layout.stage}}}};
  if (r.workload.precision == Precision::bf16) config["bf16"] = {{"enabled", true}};
  if (r.workload.precision == Precision::fp16) config["fp16"] = {{"enabled", true}};
  if (c.layout.tp > 1 || c.layout.pp > 1) {
    notes.push_back("DeepSpeed's config carries no tensor or pipeline degree: they are set in code (Megatron-DeepSpeed's "
                    "--tensor-model-parallel-size / --pipeline-model-parallel-size, or PipelineModule(num_stages)), "
                    "and its data-parallel size is then the GPUs over TP x PP");
  }
  if (c.layout.recompute != Recompute::none) {
    notes.push_back("recomputation is the model code's (torch.utils.checkpoint or deepspeed.checkpointing around each "
                    "layer), not a config key");
  }
  return config.dump();
}

}  // namespace

LaunchLines launch_lines(const PlanRequest& r, const Evaluation& c) {
  LaunchLines out;
  out.megatron = megatron_args(r, c, out.megatron_notes);
  out.torchtitan = torchtitan_toml(r, c, out.torchtitan_notes);
  out.deepspeed = deepspeed_json(r, c, out.deepspeed_notes);
  return out;
}

}  // namespace dtrain::plan

#include "cli/plan/recommend.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "cli/plan/costs/gpus.h"
#include "cli/plan/presets.h"
#include "cli/plan/costs/units.h"

namespace dtrain::plan {
namespace {

std::string percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100 * fraction);
  return text;
}

std::string needs(const Evaluation& e) {
  return format_gb(e.total) + " per GPU (model states " + format_gb(e.states.total()) +
         (e.activations ? " + activations " + format_gb(*e.activations) + ")"
                        : "; activations not counted: give --layers --hidden --heads --seq-len)");
}

std::string step_text(const Scaling& s) {
  char text[160];
  std::snprintf(text, sizeof text, "%s a step, %.0f tokens/s, %.0f TFLOP/s per GPU", format_seconds(s.step_s).c_str(),
                s.tokens_per_s, s.tflops_per_gpu);
  return std::string(text) + (s.mfu ? ", MFU " + percent(*s.mfu) : "");
}

// --bottleneck speed with predicted times: the fastest, and why the next ones lost.
void explain_speed(const std::vector<Evaluation>& all, const Evaluation& c, std::vector<std::string>& out) {
  std::vector<const Evaluation*> fitting;
  for (const Evaluation& e : all) {
    if (e.fits && e.scaling) fitting.push_back(&e);
  }
  std::sort(fitting.begin(), fitting.end(),
            [](const Evaluation* a, const Evaluation* b) { return a->scaling->step_s < b->scaling->step_s; });
  out.push_back("--bottleneck speed: the shortest predicted step of the " + std::to_string(fitting.size()) +
                " layouts that fit: " + step_text(*c.scaling) + " (compute " + format_seconds(c.scaling->compute_s) +
                " with the bubble, communication exposed " + format_seconds(c.scaling->exposed_s) + ")");
  // The next two layouts by name (a layout at another micro-batch is the same advice).
  std::vector<std::string> named = {layout_name(c.layout)};
  for (std::size_t i = 0; i < fitting.size() && named.size() < 3; ++i) {
    const Evaluation& e = *fitting[i];
    if (std::find(named.begin(), named.end(), layout_name(e.layout)) != named.end()) continue;
    named.push_back(layout_name(e.layout));
    const bool compute = e.scaling->compute_s > c.scaling->compute_s;
    out.push_back("next: " + layout_name(e.layout) + ", micro-batch " + std::to_string(e.layout.micro_batch) + ", " +
                  format_seconds(e.scaling->step_s) + " a step (" +
                  (compute ? "more compute: bubble " + percent(e.bubble) + ", recomputation " +
                                 recompute_name(e.layout.recompute)
                           : "more exposed communication: " + format_seconds(e.scaling->exposed_s)) + ")");
  }
}

// Why this layout: what did not fit below it and what it costs.
void explain_memory(const PlanRequest& r, const std::vector<Evaluation>& strategies, const Evaluation& c,
                    std::vector<std::string>& out) {
  const std::string usable = format_gb((1 - kHeadroom) * r.cluster.gpu_memory) + " usable of " +
                             format_gb(r.cluster.gpu_memory) + " (10% headroom)";
  for (const Evaluation& e : strategies) {
    if (!e.fits && (e.layout.stage < c.layout.stage || e.layout.tp * e.layout.pp < c.layout.tp * c.layout.pp))
      out.push_back(layout_name(e.layout) + " does not fit: it needs " + needs(e) + ", above the " + usable);
  }
  const int stage = c.layout.stage;
  if (c.layout.tp * c.layout.pp > 1) {
    const std::string bubble = c.layout.virtual_stages > 1
                                   ? "(p - 1)/(v*m + p - 1), v = " + std::to_string(c.layout.virtual_stages) + ","
                                   : std::string("(p - 1)/(m + p - 1)");
    out.push_back("very large model: tensor parallelism " + std::to_string(c.layout.tp) +
                  " within a node splits every layer (4 allreduces of its activations per layer, 6 with full "
                  "recomputation, at intra-node bandwidth) and " + std::to_string(c.layout.pp) +
                  " pipeline stage(s) split the layers; the bubble " + bubble + " idles " + percent(c.bubble) +
                  " of a step with " +
                  std::to_string(c.accumulation.micro_steps) + " micro-batches (a larger --global-batch shrinks it)");
  } else if (stage == 0) {
    out.push_back("the model fits: DDP needs " + needs(c) + " of the " + usable +
                  ", so nothing needs sharding: one gradient allreduce per step, overlapped with backward; use the "
                  "largest micro-batch that fits");
  } else if (stage < 3) {
    out.push_back("ZeRO-" + std::to_string(stage) + " shards the optimizer state" +
                  (stage == 2 ? " and the gradients" : "") + " over " + std::to_string(c.dp) + " ranks: " +
                  needs(c) + "; it communicates as much as DDP" +
                  (stage == 2 && c.accumulation.micro_steps > 1 ? " plus a reduce-scatter per extra micro-step" : ""));
  } else {
    out.push_back("large model: ZeRO-3 / FSDP shards the parameters too: " + needs(c) +
                  "; it sends 1.5x DDP's bytes (3P per step against 2P, ZeRO paper Sec. 7)");
  }
  if (r.workload.precision == Precision::fp32)
    out.push_back("bf16 mixed precision would halve the activations and the bytes on the wire and run the matrix "
                  "products on tensor cores (--precision bf16)");
  if (r.workload.precision == Precision::fp16)
    out.push_back("fp16 needs dynamic loss scaling (dtrain-trainer does it); bf16 has fp32's range and needs none");
}

void explain_batch(const PlanRequest& r, const Evaluation& c, std::vector<std::string>& out) {
  const Accumulation& a = c.accumulation;
  std::string line = "global batch " + std::to_string(a.global_batch) + " = micro-batch " +
                     std::to_string(c.layout.micro_batch) + " x " + std::to_string(c.dp) + " data-parallel ranks x " +
                     std::to_string(a.micro_steps) + " accumulation micro-steps";
  if (!a.exact)
    line += " (--global-batch " + std::to_string(*r.workload.global_batch) + " is not a multiple of " +
            std::to_string(static_cast<long long>(c.layout.micro_batch) * c.dp) + "; this is the next one up)";
  out.push_back(line);
}

void explain_network(const PlanRequest& r, const Evaluation& c, std::vector<std::string>& out) {
  const int nodes = r.cluster.nodes();
  std::string line = "data parallelism sends " + format_gb(c.comm.data_parallel) + " per GPU per step " +
                     (c.comm.data_parallel_crosses_nodes ? "across nodes" : "within a node");
  if (c.comm.seconds) {
    line += "; all communication takes " + format_seconds(*c.comm.seconds) + " a step";
    if (c.comm.latency_s > 0)
      line += " (" + format_seconds(c.comm.latency_s) + " of it the collectives' latency, NCCL's model)";
  }
  out.push_back(line);
  if (nodes > 1)
    out.push_back(std::to_string(nodes) + " nodes: NCCL over InfiniBand or RoCE, each rank on its nearest NIC "
                  "(`dtrain topo` gives NCCL_IB_HCA per local rank), gradients in buckets whose allreduce overlaps "
                  "backward (dtrain-trainer --ddp-bucket-mb, PyTorch DDP's bucket_cap_mb)");
  if (c.scaling) {
    out.push_back("expected scaling efficiency " + percent(c.scaling->efficiency_overlap) +
                  " with communication overlapped as the frameworks do (gradients behind backward; " +
                  format_seconds(c.scaling->exposed_s) + " a step still exposed), " +
                  percent(c.scaling->efficiency_serial) + " with none hidden (compute " +
                  format_seconds(c.scaling->compute_s) + " a step)");
  } else if (r.cluster.gpus > 1) {
    out.push_back("for a time and scaling estimate give --gpu (" + gpu_names() + "), or --intra-node-bw" +
                  std::string(nodes > 1 ? " and --inter-node-bw" : "") +
                  " (GB/s busbw of `dtrain bench allreduce`) and --gpu-tflops");
  }
}

std::string quoted(const std::string& arg) {
  return !arg.empty() && std::isdigit(static_cast<unsigned char>(arg[0])) ? "\"" + arg + "\"" : arg;
}

std::vector<std::string> trainer_args(const PlanRequest& r, const Evaluation& c) {
  const Workload& w = r.workload;
  std::vector<std::string> args;
  const ModelPreset* preset = find_preset(w.model_name);
  if (preset && !w.trainer) return {};  // a Llama: dtrain-trainer runs GPT-2 only
  if (preset && preset->trainer_name) {
    args = {"--model", w.model_name};
  } else if (w.trainer) {
    args = {"--layers", std::to_string(w.trainer->num_layers), "--channels", std::to_string(w.trainer->channels),
            "--heads", std::to_string(w.trainer->num_heads), "--max-seq-len", std::to_string(w.trainer->max_seq_len),
            "--vocab", std::to_string(w.trainer->vocab_size)};
  }
  const Layout& l = c.layout;
  if (l.tp * l.pp > 1) {
    // The pipeline's micro-batches are --grad-accum's: global batch / (micro-batch x DP), as the plan counts them.
    args.insert(args.end(), {"--tp", std::to_string(l.tp), "--pp", std::to_string(l.pp)});
    if (l.virtual_stages > 1) {
      args.insert(args.end(), {"--pp-virtual", std::to_string(l.virtual_stages)});
    } else if (l.pp > 1) {
      args.insert(args.end(), {"--pp-schedule", "1f1b"});
    }
    if (l.sequence_parallel) args.push_back("--sequence-parallel");
  }
  args.insert(args.end(), {"--zero", std::to_string(l.stage), "--precision", precision_name(w.precision),
                           "--batch-size", std::to_string(l.micro_batch), "--grad-accum",
                           std::to_string(c.accumulation.micro_steps)});
  if (w.shape) args.insert(args.end(), {"--seq-len", std::to_string(w.shape->seq_len)});
  if (l.recompute != Recompute::none) args.insert(args.end(), {"--recompute", recompute_name(l.recompute)});
  // --device auto would take a GPU where there is one, and the trainer splits models on the CPU backend only.
  if (l.tp * l.pp > 1) args.insert(args.end(), {"--device", "cpu"});
  return args;
}

std::string megatron_sizes(const Layout& l) {
  return "--tensor-model-parallel-size " + std::to_string(l.tp) + " --pipeline-model-parallel-size " +
         std::to_string(l.pp);
}

std::vector<std::string> spec_lines(const PlanRequest& r, const Evaluation& c, const std::vector<std::string>& args) {
  std::vector<std::string> lines = {
      "name: train",
      "nodes: {count: " + std::to_string(r.cluster.nodes()) + "}   # with your provider: static, join, ssh or slurm",
      "workers_per_node: " + std::to_string(r.cluster.gpus_per_node) + "   # one worker per GPU"};
  if (args.empty() && c.layout.tp * c.layout.pp == 1) {
    lines.push_back("command: [...]   # dtrain-trainer runs GPT-2 only: run " + r.workload.model_name +
                    " with a framework that has " +
                    (c.layout.stage == 0 ? std::string("DDP, e.g. PyTorch DistributedDataParallel")
                                         : "ZeRO-" + std::to_string(c.layout.stage) +
                                               ", e.g. DeepSpeed ZeRO stage " + std::to_string(c.layout.stage) +
                                               (c.layout.stage == 3 ? " or PyTorch FSDP" : "")));
    return lines;
  }
  if (args.empty()) {
    lines.push_back("command: [...]   # " + trainer_refusal(r, c.layout) + "; Megatron-LM runs the layout: " +
                    megatron_sizes(c.layout) + " (below)");
    return lines;
  }
  std::string command = "command: [dtrain-trainer";
  for (const std::string& arg : args) command += ", " + quoted(arg);
  command += ", --data, \"data/*.bin\"]";
  if (c.layout.tp * c.layout.pp > 1)
    command += "   # CPUs only so far; on GPUs, Megatron-LM with " + megatron_sizes(c.layout);
  lines.push_back(command);
  return lines;
}

// The dtrain-trainer line's notes: why there is none for a layout it does not run, or where it runs.
std::vector<std::string> trainer_notes(const PlanRequest& r, const Evaluation& c, bool has_args) {
  const Layout& l = c.layout;
  if (l.tp * l.pp == 1) return {};
  if (!has_args) {
    return {trainer_refusal(r, l) + "; no dtrain-trainer line for this layout: the Megatron-LM line below runs it"};
  }
  return {"dtrain-trainer runs tensor and pipeline parallelism on CPUs only so far (--device cpu): on GPUs, use the "
          "Megatron-LM line below (" + megatron_sizes(l) + ")"};
}

}  // namespace

Recommendation recommend(const PlanRequest& r, const std::vector<Evaluation>& strategies,
                         const std::vector<Evaluation>& search) {
  Recommendation out;
  std::vector<Evaluation> all = strategies;
  all.insert(all.end(), search.begin(), search.end());
  // With predicted times, speed weighs every layout against every other; without, the data-parallel strategies come
  // first and the model-parallel search only when none of them fits.
  const bool by_time = r.bottleneck == Bottleneck::speed && is_timed(all);
  out.choice = best_fit(by_time ? all : strategies, r.bottleneck);
  if (!out.choice) out.choice = best_fit(search, r.bottleneck);
  if (!out.choice) {
    const std::vector<Evaluation>& all = search.empty() ? strategies : search;
    const Evaluation* least = &all.front();
    for (const Evaluation& e : all) least = e.total < least->total ? &e : least;
    out.reasons.push_back("nothing fits: the least memory, " + layout_name(least->layout) + ", needs " +
                          needs(*least) + "; more GPUs, GPUs with more memory, a smaller micro-batch or activation "
                          "recomputation would");
    return out;
  }
  const Evaluation& c = *out.choice;
  if (by_time) {
    explain_speed(all, c, out.reasons);
  } else {
    out.reasons.push_back(std::string("--bottleneck ") + bottleneck_name(r.bottleneck) + ": " +
                          (r.bottleneck == Bottleneck::memory ? "of the layouts that fit, the most memory left"
                           : r.bottleneck == Bottleneck::communication
                               ? "of the layouts that fit, the least communication"
                               : "of the layouts that fit, the least model parallelism, then the least communication"));
  }
  explain_memory(r, strategies, c, out.reasons);
  explain_batch(r, c, out.reasons);
  explain_network(r, c, out.reasons);
  if (trainer_refusal(r, c.layout).empty()) out.trainer_args = trainer_args(r, c);
  out.trainer_notes = trainer_notes(r, c, !out.trainer_args.empty());
  out.spec_lines = spec_lines(r, c, out.trainer_args);
  out.launch = launch_lines(r, c);
  return out;
}

PlanReport make_report(const PlanRequest& request) {
  PlanReport report;
  report.request = request;
  report.strategies = data_parallel_strategies(request);
  report.search = model_parallel_search(request);
  report.recommendation = recommend(request, report.strategies, report.search);
  return report;
}

}  // namespace dtrain::plan

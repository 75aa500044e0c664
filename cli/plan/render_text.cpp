#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <vector>

#include "cli/plan/costs/gpus.h"
#include "cli/plan/render.h"
#include "cli/plan/costs/units.h"

namespace dtrain::plan {
namespace {

std::string line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  return std::string(text) + "\n";
}

// "450 GB/s", or "not known" for a system without a standard network.
std::string format_rate(const std::optional<double>& bytes_per_s) {
  if (!bytes_per_s) return "not known (give --inter-node-bw)";
  char text[32];
  std::snprintf(text, sizeof text, "%.0f GB/s", *bytes_per_s / 1e9);
  return text;
}

std::string header(const PlanRequest& r) {
  const Workload& w = r.workload;
  const Cluster& c = r.cluster;
  std::string out = line("dtrain plan: %.4g parameters%s%s, %s, %d GPU(s) (%d node(s) x %d), %s each (%s usable with "
                         "10%% headroom)",
                         w.params, w.model_name.empty() ? "" : " of ", w.model_name.c_str(),
                         precision_name(w.precision), c.gpus, c.nodes(), c.gpus_per_node,
                         format_gb(c.gpu_memory).c_str(), format_gb((1 - kHeadroom) * c.gpu_memory).c_str());
  if (!c.gpu.empty()) {
    const double rate = c.gpu_flops.value_or(0) / 1e12, peak = c.peak_flops.value_or(0) / 1e12;
    out += line("gpu: %s: %.0f TFLOP/s dense peak, computing at %.0f (%.0f%%%s); %s within a node, %s across nodes "
                "per GPU (line rates of %s; measured busbw is lower)",
                c.gpu.c_str(), peak, rate, peak > 0 ? 100 * rate / peak : 0.0,
                rate == peak * kAchievedShareOfPeak ? " of peak, Megatron-LM's share; --gpu-tflops for yours" : "",
                format_rate(c.intra_node_bw).c_str(), format_rate(c.inter_node_bw).c_str(), find_gpu(c.gpu)->system);
  }
  if (c.collective_latency)
    out += line("latency: %.4g us a collective or send, as measured (NCCL's model not used)",
                *c.collective_latency * 1e6);
  if (w.shape) {
    const Shape& s = *w.shape;
    const std::string groups = s.kv_heads && s.kv_heads != s.heads
                                   ? " (" + std::to_string(s.kv_heads) + " key/value)" : std::string();
    const std::string micro_batch =
        w.micro_batch_given ? std::to_string(w.micro_batch) : std::string("searched over 1, 2, 4, 8");
    out += line("shape: %d layers, hidden %d, %d heads%s, sequence %d, micro-batch %s, %s attention", s.layers,
                s.hidden, s.heads, groups.c_str(), s.seq_len, micro_batch.c_str(),
                s.flash_attention ? "flash" : "eager");
  } else {
    out += line("activations not counted: give --layers --hidden --heads --seq-len (or --model)");
  }
  if (r.framework != Framework::any || r.zero || r.recompute || !r.sequence_parallel) {
    out += line("searched: --framework %s%s%s%s", framework_name(r.framework),
                r.zero ? (", ZeRO-" + std::to_string(*r.zero) + " only").c_str() : "",
                r.recompute ? (std::string(", recompute ") + recompute_name(*r.recompute) + " only").c_str() : "",
                r.sequence_parallel ? "" : ", no sequence parallelism");
  }
  return out;
}

std::string table_head() {
  return line("%-48s %5s %3s %10s %10s %10s %10s %10s %10s %-4s %6s %10s %10s %10s", "strategy", "dp", "mb", "params",
              "grads", "optim", "states", "activ.", "total", "fits", "accum", "comm/GPU", "comm time", "step");
}

std::string row(const Evaluation& e) {
  return line("%-48s %5d %3d %10s %10s %10s %10s %10s %10s %-4s %6lld %10s %10s %10s", layout_name(e.layout).c_str(),
              e.dp, e.layout.micro_batch, format_gb(e.states.params).c_str(), format_gb(e.states.grads).c_str(),
              format_gb(e.states.optim).c_str(), format_gb(e.states.total()).c_str(),
              e.activations ? format_gb(*e.activations).c_str() : "-", format_gb(e.total).c_str(),
              e.fits ? "yes" : "no", e.accumulation.micro_steps, format_gb(e.comm.bytes()).c_str(),
              e.comm.seconds ? format_seconds(*e.comm.seconds).c_str() : "-",
              e.scaling ? format_seconds(e.scaling->step_s).c_str() : "-");
}

// A tensor- or pipeline-parallel layout: a row per pipeline stage (every rank of a stage reports the same).
std::string stage_rows(const Evaluation& e) {
  std::string out;
  for (const TrainerStageMemory& s : e.trainer_stages) {
    const std::string name = layout_name(e.layout) + (e.layout.pp > 1 ? ", stage " + std::to_string(s.stage) : "");
    out += line("%-29s %14llu %14llu %14llu %14llu %14llu   (%d layers, %d micro-batch(es) in flight)",
                name.c_str(), static_cast<unsigned long long>(s.states.params),
                static_cast<unsigned long long>(s.states.grads), static_cast<unsigned long long>(s.states.optim),
                static_cast<unsigned long long>(s.states.params + s.states.grads + s.states.optim),
                static_cast<unsigned long long>(s.activations), s.layers, s.activation_sets);
  }
  return out;
}

std::string trainer_table(const PlanReport& report) {
  std::string out = line("\ndtrain-trainer's own accounting (its --metrics mem_*_bytes per rank; fp32 gradients, "
                         "widened fp32 tensors at stages 1-2: README \"Mixed precision\"; with --tp/--pp a row per "
                         "pipeline stage, 1F1B over the accumulation's micro-batches):");
  out += line("%-29s %14s %14s %14s %14s %14s", "strategy", "params", "grads", "optim", "total", "activations");
  auto bytes = [](const std::optional<double>& value) {
    return value ? std::to_string(static_cast<unsigned long long>(*value)) : std::string("-");
  };
  for (const Evaluation& e : report.strategies) {
    const std::string activations = bytes(e.trainer_activations);
    if (!e.trainer_refusal.empty()) {
      out += line("%-29s   (%s)", layout_name(e.layout).c_str(), e.trainer_refusal.c_str());
      continue;
    }
    if (!e.trainer_stages.empty()) {
      out += stage_rows(e);
      continue;
    }
    if (!e.trainer) {
      out += line("%-29s %14s %14s %14s %14s %14s   (no mem_* model-state metrics at --zero 0)",
                  layout_name(e.layout).c_str(), "-", "-", "-", "-", activations.c_str());
      continue;
    }
    const auto& t = *e.trainer;
    out += line("%-29s %14llu %14llu %14llu %14llu %14s", layout_name(e.layout).c_str(),
                static_cast<unsigned long long>(t.params), static_cast<unsigned long long>(t.grads),
                static_cast<unsigned long long>(t.optim), static_cast<unsigned long long>(t.params + t.grads + t.optim),
                activations.c_str());
  }
  return out;
}

std::string search_table(const PlanReport& report) {
  constexpr int kShown = 12;  // a screenful; --json lists every layout
  std::vector<const Evaluation*> fitting;
  for (const Evaluation& e : report.search) {
    if (e.fits) fitting.push_back(&e);
  }
  const bool timed = is_timed(report.search);
  if (timed) {
    std::stable_sort(fitting.begin(), fitting.end(), [](const Evaluation* a, const Evaluation* b) {
      return a->scaling->step_s < b->scaling->step_s;
    });
  }
  std::string out;
  int shown = 0;
  for (const Evaluation* e : fitting) {
    if (shown++ < kShown) out += row(*e);
  }
  const int count = static_cast<int>(fitting.size());
  std::string head = line("\nwith recomputation, tensor parallelism (within a node) and pipeline stages, %d of %zu "
                          "layouts fit%s:", count, report.search.size(), timed ? " (fastest first)" : "");
  if (count > kShown) out += line("(%d more fit; --json lists every layout)", count - kShown);
  return head + (count ? table_head() + out : std::string());
}

std::string notes_text(const std::vector<std::string>& notes) {
  std::string out;
  for (const std::string& note : notes) out += "  # " + note + "\n";
  return out;
}

std::string launch_text(const LaunchLines& launch) {
  std::string out = "\nMegatron-LM (pretrain_gpt.py arguments):\n ";
  for (const std::string& arg : launch.megatron) out += " " + arg;
  out += "\n" + notes_text(launch.megatron_notes) + "\ntorchtitan (job config, TOML):\n";
  for (const std::string& toml : launch.torchtitan) out += "  " + toml + "\n";
  out += notes_text(launch.torchtitan_notes) + "\nDeepSpeed (config, JSON):\n  " + launch.deepspeed + "\n";
  return out + notes_text(launch.deepspeed_notes);
}

std::string recommendation(const PlanReport& report) {
  const Recommendation& rec = report.recommendation;
  std::string out = rec.choice ? line("\nrecommended: %s, micro-batch %d", layout_name(rec.choice->layout).c_str(),
                                      rec.choice->layout.micro_batch)
                               : line("\nrecommended: nothing fits");
  for (const std::string& reason : rec.reasons) out += "  - " + reason + "\n";
  if (!rec.trainer_args.empty()) {
    std::string args = "dtrain-trainer";
    for (const std::string& arg : rec.trainer_args) args += " " + arg;
    out += "\ndtrain-trainer flags:\n  " + args + "\n";
  }
  if (!rec.trainer_notes.empty())
    out += (rec.trainer_args.empty() ? "\ndtrain-trainer:\n" : "") + notes_text(rec.trainer_notes);
  if (!rec.spec_lines.empty()) {
    out += "\njob spec:\n";
    for (const std::string& spec : rec.spec_lines) out += "  " + spec + "\n";
  }
  if (rec.launch) out += launch_text(*rec.launch);
  return out;
}

}  // namespace

std::string render_text(const PlanReport& report) {
  std::string out = header(report.request) + "\n" + table_head();
  for (const Evaluation& e : report.strategies) out += row(e);
  if (report.request.trainer_accounting) out += trainer_table(report);
  const bool any_fits = std::any_of(report.strategies.begin(), report.strategies.end(),
                                    [](const Evaluation& e) { return e.fits; });
  if (!any_fits && !report.search.empty()) out += search_table(report);
  return out + recommendation(report);
}

}  // namespace dtrain::plan

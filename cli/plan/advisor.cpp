#include "cli/plan/advisor.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "cli/plan/presets.h"

namespace dtrain::plan {
namespace {

// Time for `bytes` at `bandwidth` (bytes/s); 0 bytes need no bandwidth.
std::optional<double> transfer_seconds(double bytes, const std::optional<double>& bandwidth) {
  if (bytes <= 0) return 0.0;
  if (!bandwidth) return std::nullopt;
  return bytes / *bandwidth;
}

// Parameters a GPU of the most loaded stage holds (formulas.h, stage_params): what its ZeRO states and its
// data-parallel traffic are counted for.
double gpu_params(const Workload& w, const Layout& l) {
  return w.shape ? stage_params(w.params, *w.shape, l.tp, l.pp) : w.params / (l.tp * l.pp);
}

// The data-parallel group: dp ranks, tp * dp of them within a node at most (Megatron's rank order, advisor.h).
int data_parallel_nodes(const Cluster& c, const Layout& l, int dp) {
  const int per_node = std::max(1, c.gpus_per_node / l.tp);
  return std::max(1, (dp + per_node - 1) / per_node);
}

// Each collective's latency, apart from its bytes' time: the measured one (--collective-latency-us) when given, else
// NCCL's model (formulas.h, collective_latency_seconds).
struct Latency {
  double data_parallel = 0;
  double tensor_parallel = 0;
  double pipeline = 0;
};

double latency_of(const Cluster& c, Collective kind, int ranks, int nodes) {
  if (ranks <= 1) return 0;
  return c.collective_latency ? *c.collective_latency : collective_latency_seconds(kind, ranks, nodes);
}

Latency latencies(const PlanRequest& r, const Layout& l, int dp, int steps) {
  const Workload& w = r.workload;
  const Cluster& c = r.cluster;
  const int layers = w.shape ? stage_layers(w.shape->layers, l.pp) : 1;
  const double bucket_params = w.bucket_bytes ? *w.bucket_bytes / value_bytes(w.precision) : 0;
  const double dp_count = data_parallel_collectives(l.stage, gpu_params(w, l), dp, steps, layers, bucket_params);
  const Collective dp_kind = l.stage == 0 ? Collective::allreduce : Collective::all_gather;
  Latency out;
  out.data_parallel = dp_count * latency_of(c, dp_kind, dp, data_parallel_nodes(c, l, dp));
  if (l.tp > 1 && w.shape) {
    // Megatron: the allreduces of formulas.h's tensor_parallel_allreduces per micro-batch, or with sequence
    // parallelism an all-gather and a reduce-scatter for each (Korthikanti Sec. 4.2.2); the cross-entropy's small
    // collectives once each (tensor_parallel_collectives).
    const double each = latency_of(c, Collective::allreduce, l.tp, 1);
    const double split = tensor_parallel_allreduces(layers, l.pp, l.recompute);
    const double all = tensor_parallel_collectives(w.shape->layers, l.pp, l.recompute);
    const double sequence = l.sequence_parallel ? 2 * latency_of(c, Collective::all_gather, l.tp, 1) : each;
    out.tensor_parallel = (sequence * split + each * std::max(0.0, all - split)) * steps;
  }
  // The tied embedding's gradient sum between the first and the last stage, once a step, and the stages' sends,
  // each its latency (on two nodes when the pipeline leaves the node: stages are outermost, advisor.h).
  const int pipeline_nodes = c.nodes() > 1 ? 2 : 1;
  if (w.shape && tied_embedding_bytes(*w.shape, l.tp, l.pp, w.precision) > 0)
    out.pipeline = latency_of(c, Collective::allreduce, 2, pipeline_nodes);
  if (l.pp > 1) {
    const double send = c.collective_latency ? *c.collective_latency : send_latency_seconds(pipeline_nodes);
    out.pipeline += pipeline_sends(l.pp, steps, l.virtual_stages) * send;
  }
  return out;
}

Comm communication(const PlanRequest& r, const Layout& l, int dp, long long micro_steps) {
  const Workload& w = r.workload;
  const Cluster& c = r.cluster;
  const int steps = static_cast<int>(micro_steps);
  Comm comm;
  comm.data_parallel = data_parallel_bytes(l.stage, gpu_params(w, l), dp, steps, w.precision);
  if (w.shape) {
    const double allreduces = tensor_parallel_allreduces(stage_layers(w.shape->layers, l.pp), l.pp, l.recompute);
    comm.tensor_parallel = tensor_parallel_bytes(*w.shape, l.tp, allreduces, steps, w.precision);
    comm.pipeline = pipeline_bytes(*w.shape, l.pp, steps, w.precision, l.virtual_stages,
                                   l.sequence_parallel ? l.tp : 1) +
                    tied_embedding_bytes(*w.shape, l.tp, l.pp, w.precision);
  }
  comm.data_parallel_crosses_nodes = l.tp * dp > c.gpus_per_node;
  comm.pipeline_crosses_nodes = l.pp > 1 && c.nodes() > 1;
  const auto dp_s =
      transfer_seconds(comm.data_parallel, comm.data_parallel_crosses_nodes ? c.inter_node_bw : c.intra_node_bw);
  const auto tp_s = transfer_seconds(comm.tensor_parallel, c.intra_node_bw);
  const auto pp_s =
      transfer_seconds(comm.pipeline, comm.pipeline_crosses_nodes ? c.inter_node_bw : c.intra_node_bw);
  const Latency latency = latencies(r, l, dp, steps);
  comm.latency_s = latency.data_parallel + latency.tensor_parallel + latency.pipeline;
  if (dp_s && tp_s && pp_s) comm.seconds = *dp_s + *tp_s + *pp_s + comm.latency_s;
  if (dp_s) comm.data_parallel_seconds = *dp_s + latency.data_parallel;
  if (tp_s) comm.tensor_parallel_seconds = *tp_s + latency.tensor_parallel;
  if (pp_s) comm.pipeline_seconds = *pp_s + latency.pipeline;
  return comm;
}

std::optional<Scaling> scaling(const PlanRequest& r, const Evaluation& e) {
  const Cluster& c = r.cluster;
  if (!c.gpu_flops || !e.comm.seconds || !r.workload.shape) return std::nullopt;
  const Shape& shape = *r.workload.shape;
  const double tokens = static_cast<double>(e.accumulation.global_batch) * shape.seq_len;
  const double model_flops = model_flops_per_token(r.workload.params, shape) * tokens;
  const double step_flops = model_flops * recompute_flops_factor(shape, e.layout.recompute);
  Scaling s;
  s.ideal_s = model_flops / c.gpus / *c.gpu_flops;
  // The slowest stage sets the pace (formulas.h, stage_imbalance: uneven stages, the output layer on the last), and
  // the bubble stretches it: (p - 1)/m of its busy time for 1F1B and GPipe (formulas.h, pipeline_bubble).
  const double busy =
      step_flops / c.gpus / *c.gpu_flops * stage_imbalance(r.workload.params, shape, e.layout.pp, e.layout.recompute);
  s.compute_s = busy / (1 - e.bubble);
  s.bubble_s = s.compute_s - busy;
  s.efficiency_serial = s.ideal_s / (s.compute_s + *e.comm.seconds);
  const double dp_s = *e.comm.data_parallel_seconds;
  const double grad_bytes = gpu_params(r.workload, e.layout) * value_bytes(r.workload.precision);
  const double bucket_bytes = r.workload.bucket_bytes.value_or(
      static_cast<double>(default_bucket_bytes(static_cast<std::uint64_t>(grad_bytes))));
  const double last_share = last_bucket_bytes(grad_bytes, bucket_bytes) / grad_bytes;
  const int micro_steps = static_cast<int>(std::min<long long>(e.accumulation.micro_steps, 1 << 30));
  s.data_parallel_exposed_s = exposed_data_parallel_seconds(e.layout.stage, dp_s, s.compute_s, micro_steps,
                                                            last_share);
  s.tensor_parallel_s = e.comm.tensor_parallel_seconds.value_or(0);
  s.pipeline_s = e.comm.pipeline_seconds.value_or(0);
  s.exposed_s = s.data_parallel_exposed_s + s.tensor_parallel_s + s.pipeline_s;
  const double shard = gpu_params(r.workload, e.layout) / (e.layout.stage >= 1 ? e.dp : 1);
  s.optimizer_s = optimizer_seconds(shard, c.memory_bw.value_or(0));
  s.step_s = s.compute_s + s.exposed_s + s.optimizer_s;
  s.efficiency_overlap = s.ideal_s / s.step_s;
  s.tokens_per_s = tokens / s.step_s;
  s.tflops_per_gpu = step_flops / c.gpus / s.step_s / 1e12;
  if (c.peak_flops) s.mfu = model_flops / c.gpus / s.step_s / *c.peak_flops;
  return s;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

int max_stage(int pp) { return pp > 1 ? 1 : 3; }

// 1, and 2 and 4 interleaved stages where Megatron allows them: p > 1, p * v dividing the layers, the micro-batches
// (with the data-parallel size of tp, pp) a multiple of p.
std::vector<int> interleavings(const PlanRequest& r, const Shape& shape, int tp, int pp, int micro_batch) {
  std::vector<int> out = {1};
  if (pp <= 1) return out;
  const int dp = r.cluster.gpus / (tp * pp);
  const Workload& w = r.workload;
  const long long micro_steps =
      w.global_batch ? accumulation(*w.global_batch, micro_batch, dp).micro_steps : 1;
  if (micro_steps % pp != 0) return out;
  for (int v : {2, 4}) {
    if (shape.layers % (pp * v) == 0) out.push_back(v);
  }
  return out;
}

// dtrain-trainer's own numbers for the layout (Evaluation::trainer): without tensor or pipeline parallelism its ZeRO
// engine's (none at stage 0) and one activation set; with them every stage's, the largest in front.
void add_trainer_accounting(const PlanRequest& r, Evaluation& e) {
  const Workload& w = r.workload;
  const Layout& l = e.layout;
  if (l.tp * l.pp == 1) {
    e.trainer = trainer_model_states(*w.trainer, l.stage, w.precision, e.dp);
    if (w.shape) {
      e.trainer_activations = static_cast<double>(
          trainer_activation_bytes(*w.trainer, l.micro_batch, w.shape->seq_len, w.precision, l.recompute));
    }
    return;
  }
  e.trainer_refusal = trainer_refusal(r, l);
  if (!e.trainer_refusal.empty()) return;
  e.trainer_stages = trainer_stage_memory(*w.trainer, trainer_layout(r, e), w.precision);
  const auto largest = std::max_element(e.trainer_stages.begin(), e.trainer_stages.end(),
                                        [](const auto& a, const auto& b) { return a.total() < b.total(); });
  e.trainer = largest->states;
  e.trainer_activations = static_cast<double>(largest->activations);
}

}  // namespace

std::string trainer_refusal(const PlanRequest& r, const Layout& l) {
  if (l.tp * l.pp == 1) return "";
  const Workload& w = r.workload;
  if (!w.trainer && find_preset(w.model_name))
    return "dtrain-trainer runs GPT-2 only, not " + w.model_name;
  if (!w.trainer)
    return "dtrain-trainer splits its own GPT-2 only: give the model as its shape, --layers --hidden --heads "
           "--seq-len with --vocab and no --params (or a GPT-2 preset), for its --tp/--pp flags";
  TrainerLayout t;
  t.tp = l.tp;
  t.pp = l.pp;
  t.dp = r.cluster.gpus / (l.tp * l.pp);
  t.ranks_per_node = r.cluster.gpus_per_node;
  t.zero = l.stage;
  t.sequence_parallel = l.sequence_parallel;
  t.virtual_stages = l.virtual_stages;
  t.micro_batch = l.micro_batch > 0 ? l.micro_batch : w.micro_batch;
  t.micro_batches = static_cast<int>(std::min<long long>(
      w.global_batch ? accumulation(*w.global_batch, t.micro_batch, t.dp).micro_steps : 1, 1 << 30));
  t.seq_len = w.shape ? w.shape->seq_len : w.trainer->max_seq_len;
  return trainer_layout_refusal(*w.trainer, t);
}

TrainerLayout trainer_layout(const PlanRequest& r, const Evaluation& e) {
  TrainerLayout t;
  t.tp = e.layout.tp;
  t.pp = e.layout.pp;
  t.dp = e.dp;
  t.ranks_per_node = r.cluster.gpus_per_node;
  t.zero = e.layout.stage;
  t.recompute = e.layout.recompute;
  t.sequence_parallel = e.layout.sequence_parallel;
  t.virtual_stages = e.layout.virtual_stages;
  t.schedule = t.virtual_stages > 1 ? trainer::PipeSchedule::interleaved : trainer::PipeSchedule::one_f_one_b;
  t.micro_batches = static_cast<int>(std::min<long long>(e.accumulation.micro_steps, 1 << 30));
  t.micro_batch = e.layout.micro_batch;
  t.seq_len = r.workload.shape ? r.workload.shape->seq_len : r.workload.trainer->max_seq_len;
  return t;
}

std::string layout_name(const Layout& layout) {
  static const char* const kStages[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP"};
  std::string name = kStages[layout.stage];
  if (layout.tp > 1) name += " + TP " + std::to_string(layout.tp) + (layout.sequence_parallel ? " (SP)" : "");
  if (layout.pp > 1) name += " + PP " + std::to_string(layout.pp);
  if (layout.virtual_stages > 1) name += " x " + std::to_string(layout.virtual_stages) + " interleaved";
  if (layout.recompute != Recompute::none) name += std::string(" + ") + recompute_name(layout.recompute) + " recompute";
  return name;
}

Evaluation evaluate(const PlanRequest& request, const Layout& layout) {
  Layout l = layout;
  if (l.micro_batch <= 0) l.micro_batch = request.workload.micro_batch;
  PlanRequest r = request;  // the workload at this layout's micro-batch
  r.workload.micro_batch = l.micro_batch;
  if (r.workload.shape) r.workload.shape->micro_batch = l.micro_batch;
  const Workload& w = r.workload;
  const Cluster& c = r.cluster;
  Evaluation e;
  e.layout = l;
  e.dp = c.gpus / (l.tp * l.pp);
  e.states = r.framework == Framework::megatron && l.stage <= 1
                 ? megatron_model_states(l.stage == 1, w.precision, gpu_params(w, l), e.dp)
                 : zero_model_states(l.stage, w.precision, gpu_params(w, l), e.dp);
  e.accumulation = w.global_batch ? accumulation(*w.global_batch, l.micro_batch, e.dp)
                                  : Accumulation{1, static_cast<long long>(l.micro_batch) * e.dp, true};
  const int micro_steps = static_cast<int>(std::min<long long>(e.accumulation.micro_steps, 1 << 30));
  if (r.trainer_accounting && w.trainer) add_trainer_accounting(r, e);
  if (w.shape) {
    e.activations = activation_bytes(*w.shape, l.tp, l.pp, micro_steps, w.precision, l.recompute,
                                     l.sequence_parallel, l.virtual_stages);
  }
  e.total = e.states.total() + e.activations.value_or(0);
  e.fits = fits(e.total, c.gpu_memory);
  e.bubble = pipeline_bubble(l.pp, micro_steps, l.virtual_stages);
  e.comm = communication(r, l, e.dp, micro_steps);
  e.scaling = scaling(r, e);
  return e;
}

bool runs_on(const PlanRequest& r, const Layout& l) {
  if (r.zero && l.stage != *r.zero) return false;
  if (r.recompute && l.recompute != *r.recompute) return false;
  if (l.tp > 1 && l.sequence_parallel != r.sequence_parallel) return false;
  switch (r.framework) {
    case Framework::any: return true;
    case Framework::megatron: return l.stage <= 1;
    case Framework::deepspeed:
      return l.tp == 1 && l.virtual_stages == 1 && l.recompute != Recompute::selective && (l.pp == 1 || l.stage <= 1);
  }
  return true;
}

std::vector<Evaluation> data_parallel_strategies(const PlanRequest& r) {
  const int tp = r.tp.value_or(1), pp = r.pp.value_or(1);
  std::vector<Evaluation> out;
  for (int stage = 0; stage <= max_stage(pp); ++stage) {
    const Layout layout{stage, tp, pp, r.recompute.value_or(Recompute::none), tp > 1 && r.sequence_parallel,
                        r.pp_virtual.value_or(1)};
    if (runs_on(r, layout)) out.push_back(evaluate(r, layout));
  }
  return out;
}

// The micro-batches the search tries: --micro-batch alone when given, else 1, 2, 4 and 8, each only where the
// global batch is a whole number of them over the data-parallel ranks (a larger one would change the batch).
std::vector<int> micro_batches(const PlanRequest& r, int dp) {
  const Workload& w = r.workload;
  if (w.micro_batch_given) return {w.micro_batch};
  std::vector<int> out = {1};
  for (int b : {2, 4, 8}) {
    if (w.global_batch && accumulation(*w.global_batch, b, dp).exact) out.push_back(b);
  }
  return out;
}

std::vector<Evaluation> model_parallel_search(const PlanRequest& r) {
  std::vector<Evaluation> out;
  if (!r.workload.shape || r.tp || r.pp) return out;
  const Shape& shape = *r.workload.shape;
  for (int tp : divisors(r.cluster.gpus_per_node)) {
    if (shape.heads % tp != 0 || (shape.kv_heads && shape.kv_heads % tp != 0)) continue;
    for (int pp : divisors(r.cluster.gpus / tp)) {
      if (!splits_layers(shape.layers, pp)) continue;
      for (int b : micro_batches(r, r.cluster.gpus / (tp * pp))) {
        for (int v : interleavings(r, shape, tp, pp, b)) {
          for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
            // tp * pp = 1 at the request's micro-batch without recomputation is data_parallel_strategies' row; with
            // flash attention selective recomputation is no recomputation (formulas.h) unless --recompute asks.
            if (tp * pp == 1 && b == r.workload.micro_batch && recompute == r.recompute.value_or(Recompute::none))
              continue;
            if (recompute == Recompute::selective && shape.flash_attention && !r.recompute) continue;
            for (int stage = 0; stage <= max_stage(pp); ++stage) {
              const Layout layout{stage, tp, pp, recompute, tp > 1 && r.sequence_parallel, v, b};
              if (runs_on(r, layout)) out.push_back(evaluate(r, layout));
            }
          }
        }
      }
    }
  }
  return out;
}

bool is_timed(const std::vector<Evaluation>& candidates) {
  return std::all_of(candidates.begin(), candidates.end(),
                     [](const Evaluation& e) { return !e.fits || e.scaling.has_value(); });
}

std::optional<Evaluation> best_fit(const std::vector<Evaluation>& candidates, Bottleneck bottleneck) {
  auto cost = [](const Evaluation& e) { return e.comm.seconds ? *e.comm.seconds : e.comm.bytes(); };
  const bool timed = is_timed(candidates);
  auto key = [&](const Evaluation& e) {
    const int model_parallel = e.layout.tp * e.layout.pp;
    const double recompute = static_cast<double>(e.layout.recompute);
    switch (bottleneck) {
      case Bottleneck::memory:
        return std::make_tuple(double(model_parallel), e.total, double(e.layout.stage), recompute);
      case Bottleneck::communication:
        return std::make_tuple(cost(e), double(model_parallel), double(e.layout.stage), recompute);
      case Bottleneck::speed: break;
    }
    return std::make_tuple(double(model_parallel), cost(e), recompute, double(e.layout.stage));
  };
  if (bottleneck == Bottleneck::speed && timed) {
    // The fastest predicted, but among those within kSpeedTolerance of it the simplest: less model parallelism, a
    // lower stage, less recomputation (the model's error is larger than such a difference).
    double fastest = 0;
    for (const Evaluation& e : candidates) {
      if (e.fits && (fastest == 0 || e.scaling->step_s < fastest)) fastest = e.scaling->step_s;
    }
    auto simple = [](const Evaluation& e) {
      return std::make_tuple(e.layout.tp * e.layout.pp, e.layout.stage, static_cast<int>(e.layout.recompute),
                             e.layout.micro_batch, e.scaling->step_s);
    };
    std::optional<Evaluation> best;
    for (const Evaluation& e : candidates) {
      if (!e.fits || e.scaling->step_s > fastest * (1 + kSpeedTolerance)) continue;
      if (!best || simple(e) < simple(*best)) best = e;
    }
    return best;
  }
  std::optional<Evaluation> best;
  for (const Evaluation& e : candidates) {
    if (e.fits && (!best || key(e) < key(*best))) best = e;
  }
  return best;
}

}  // namespace dtrain::plan

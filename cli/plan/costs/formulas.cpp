#include "cli/plan/costs/formulas.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dtrain::plan {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

double value_bytes(Precision precision) { return precision == Precision::fp32 ? 4.0 : 2.0; }

ModelStates zero_model_states(int stage, Precision precision, double params, int dp) {
  if (stage < 0 || stage > 3 || dp < 1)
    throw std::invalid_argument("zero_model_states: stage " + std::to_string(stage) + " over " + std::to_string(dp) +
                                " ranks; the stage is 0..3 and the ranks at least 1");
  const bool mixed = precision != Precision::fp32;
  const double param_bytes = mixed ? 2 : 4;
  const double grad_bytes = mixed ? 2 : 4;
  const double optim_bytes = mixed ? 12 : 8;  // K: master + m + v, or m + v
  const double n = dp;
  ModelStates m;
  m.params = param_bytes * params / (stage == 3 ? n : 1);
  m.grads = grad_bytes * params / (stage >= 2 ? n : 1);
  m.optim = optim_bytes * params / (stage >= 1 ? n : 1);
  return m;
}

ModelStates megatron_model_states(bool distributed, Precision precision, double params, int dp) {
  if (dp < 1) throw std::invalid_argument("megatron_model_states: " + std::to_string(dp) + " ranks; at least 1");
  const double d = distributed ? dp : 1;
  ModelStates m;
  switch (precision) {
    case Precision::bf16: m = {2 * params, 4 * params, 12 * params / d}; break;
    case Precision::fp16: m = {2 * params, 2 * params, 16 * params / d}; break;
    case Precision::fp32: m = {4 * params, 4 * params, 8 * params / d}; break;
  }
  return m;
}

int stage_layers(int layers, int pp) { return pp <= 1 ? layers : (layers + pp - 1) / pp; }

bool splits_layers(int layers, int pp) {
  return pp >= 1 && pp <= layers && layers - static_cast<long long>(pp - 1) * stage_layers(layers, pp) >= 1;
}

double stage_params(double params, const Shape& shape, int tp, int pp) {
  if (shape.vocab <= 0 || pp <= 1 || shape.layers <= 0) return params / (static_cast<double>(tp) * pp);
  const double embedding = static_cast<double>(shape.vocab) * shape.hidden;
  const double layers = std::max(0.0, params - embedding * (shape.untied_embeddings ? 2 : 1));
  return (layers / shape.layers * stage_layers(shape.layers, pp) + embedding) / tp;
}

double layer_activation_bytes(const Shape& shape, int tp, Precision precision, Recompute recompute,
                              bool sequence_parallel) {
  const double s = shape.seq_len, b = shape.micro_batch, h = shape.hidden, a = shape.heads, t = tp;
  const double sbh = s * b * h;
  const double r = shape.kv_heads > 0 ? static_cast<double>(shape.kv_heads) / shape.heads : 1.0;
  const double f = shape.ffn > 0 ? shape.ffn : 4 * h;
  const double split = 4 + 4 * r + (shape.gated_mlp ? 6 : 4) * f / h;  // 24 for GPT's layer
  const bool scores_kept = recompute == Recompute::none && !shape.flash_attention;
  const double scores = scores_kept ? 5 * a * s / h : 0;  // the attention core's 5as^2b
  double sixteen_bit = sequence_parallel ? sbh * (10 + split + scores) / t : sbh * (10 + split / t + scores / t);
  if (recompute == Recompute::full) sixteen_bit = sequence_parallel ? 2 * sbh / t : 2 * sbh;
  return sixteen_bit * value_bytes(precision) / 2;
}

double activation_bytes(const Shape& shape, int tp, int pp, int micro_batches, Precision precision,
                        Recompute recompute, bool sequence_parallel, int virtual_stages) {
  double in_flight = std::min(micro_batches, pp);
  if (virtual_stages > 1) in_flight *= 1 + static_cast<double>(pp - 1) / (pp * virtual_stages);
  const double layers_per_stage = stage_layers(shape.layers, pp);
  return in_flight * layers_per_stage * layer_activation_bytes(shape, tp, precision, recompute, sequence_parallel);
}

double model_flops_per_token(double params, const Shape& shape) {
  return 6 * params + 12.0 * shape.layers * shape.hidden * shape.seq_len;
}

double recompute_flops_factor(const Shape& shape, Recompute recompute) {
  const double s = shape.seq_len, h = shape.hidden;
  switch (recompute) {
    case Recompute::none: return 1;
    case Recompute::selective: return shape.flash_attention ? 1 : 1 + s / (18 * h + 3 * s);
    case Recompute::full: return 4.0 / 3.0;
  }
  return 1;
}

double pipeline_bubble(int pp, int micro_batches, int virtual_stages) {
  return static_cast<double>(pp - 1) / (static_cast<double>(virtual_stages) * micro_batches + pp - 1);
}

double ring_gather_bytes(double bytes, int n) { return bytes * (n - 1) / n; }

double ring_allreduce_bytes(double bytes, int n) { return 2 * ring_gather_bytes(bytes, n); }

double data_parallel_bytes(int stage, double params, int dp, int micro_steps, Precision precision) {
  const double k = micro_steps;
  double collectives = 2;  // stages 0 and 1
  if (stage == 2) collectives = k + 1;
  if (stage == 3) collectives = 3 * k;
  return collectives * ring_gather_bytes(params * value_bytes(precision), dp);
}

double tensor_parallel_allreduces(int layers_per_stage, int pp, Recompute recompute) {
  const double per_layer = recompute == Recompute::full ? 6 : 4;
  return per_layer * layers_per_stage + (pp > 1 ? 1 : 2);
}

double tensor_parallel_collectives(int layers, int pp, Recompute recompute) {
  const double per_layer = recompute == Recompute::full ? 6 : 4;
  if (pp <= 1) return per_layer * layers + 2 + kCrossEntropyCollectives;
  const int first = stage_layers(layers, pp), last = std::max(1, layers - (pp - 1) * first);
  return std::max(per_layer * first + 1, per_layer * last + 1 + kCrossEntropyCollectives);
}

double tensor_parallel_bytes(const Shape& shape, int tp, double allreduces_per_micro_batch, int micro_steps,
                             Precision precision) {
  const double activations = static_cast<double>(shape.seq_len) * shape.micro_batch * shape.hidden *
                             value_bytes(precision);
  return allreduces_per_micro_batch * micro_steps * ring_allreduce_bytes(activations, tp);
}

double tied_embedding_bytes(const Shape& shape, int tp, int pp, Precision precision) {
  if (pp <= 1 || shape.vocab <= 0 || shape.untied_embeddings) return 0;
  const double values = static_cast<double>(shape.vocab) * shape.hidden / tp;
  return ring_allreduce_bytes(values * value_bytes(precision), 2);
}

double stage_imbalance(double params, const Shape& shape, int pp, Recompute recompute) {
  if (pp <= 1 || shape.layers <= 0) return 1;
  const double L = shape.layers, h = shape.hidden, V = shape.vocab;
  const double embeddings = V * h * (shape.untied_embeddings ? 2 : 1);
  const double layer = (6 * std::max(0.0, params - embeddings) / L + 12 * h * shape.seq_len) *
                       recompute_flops_factor(shape, recompute);
  const double head = 6 * V * h;
  const int most = stage_layers(shape.layers, pp);
  const double first = most * layer, last = (shape.layers - (pp - 1) * most) * layer + head;
  return pp * std::max(first, last) / (L * layer + head);
}

double pipeline_bytes(const Shape& shape, int pp, int micro_steps, Precision precision, int virtual_stages,
                      int sequence_shards) {
  if (pp <= 1) return 0;
  const double activations = static_cast<double>(shape.seq_len) * shape.micro_batch * shape.hidden *
                             value_bytes(precision) / sequence_shards;
  return 2.0 * micro_steps * activations * virtual_stages;
}

double pipeline_sends(int pp, int micro_steps, int virtual_stages) {
  return pp <= 1 ? 0 : 2.0 * micro_steps * virtual_stages;
}

double send_latency_seconds(int nodes) { return collective_latency_seconds(Collective::all_gather, 2, nodes); }

double collective_latency_seconds(Collective collective, int ranks, int nodes) {
  if (ranks <= 1) return 0;
  nodes = std::max(1, std::min(nodes, ranks));
  constexpr double kUs = 1e-6;
  const bool allreduce = collective == Collective::allreduce;
  const double steps = (allreduce ? 2.0 : 1.0) * (ranks - 1);
  const double inter_steps = nodes > 1 ? (allreduce ? 2.0 : 1.0) * (nodes - 1) : 0;
  double best = (8.4 + (steps - inter_steps) * 3.4 + inter_steps * 14.0) * kUs;  // ring
  const double log_nodes = std::floor(std::log2(static_cast<double>(nodes)));
  if (allreduce) {
    const double per_node = static_cast<double>(ranks) / nodes;
    best = std::min(best, (8.4 + 2 * ((per_node - 1) * 4.0 + log_nodes * 14.0)) * kUs);  // tree
  } else if (nodes == ranks) {
    best = std::min(best, (8.0 + log_nodes * 14.0 / 3.5 + ranks * 2.8) * kUs);  // PAT
  }
  return best;
}

double data_parallel_collectives(int stage, double params, int dp, int micro_steps, int layers,
                                 double bucket_params) {
  if (dp <= 1) return 0;
  const double k = micro_steps;
  if (stage == 3) return 3 * k * layers;
  const double buckets = std::ceil(params / (bucket_params > 0 ? bucket_params : std::max(40e6, 1e6 * dp)));
  return buckets * (stage == 0 ? 1 : stage == 1 ? 2 : k + 1);
}

Accumulation accumulation(long long wanted_global_batch, int micro_batch, int dp) {
  const long long per_micro_step = static_cast<long long>(micro_batch) * dp;
  Accumulation a;
  a.micro_steps = std::max(1LL, (wanted_global_batch + per_micro_step - 1) / per_micro_step);
  a.global_batch = a.micro_steps * per_micro_step;
  a.exact = a.global_batch == wanted_global_batch;
  return a;
}

double optimizer_seconds(double shard_params, double memory_bw) {
  return memory_bw > 0 ? kAdamBytesPerParam * shard_params / memory_bw : 0;
}

bool fits(double bytes, double gpu_memory) { return bytes <= (1 - kHeadroom) * gpu_memory; }

double compute_seconds(double params, double tokens, double flops_per_s) { return 6 * params * tokens / flops_per_s; }

double exposed_data_parallel_seconds(int stage, double comm_s, double compute_s, int micro_steps,
                                     double last_bucket_share) {
  const double k = micro_steps;
  const double backward = kBackwardShare * compute_s;
  switch (stage) {
    case 0: {
      const double last = comm_s * last_bucket_share;
      return last + std::max(0.0, comm_s - last - backward / k);
    }
    case 1: return comm_s / 2 + std::max(0.0, comm_s / 2 - backward / k);
    case 2: return comm_s / (k + 1) + std::max(0.0, comm_s * k / (k + 1) - backward);
    case 3: return std::max(0.0, comm_s - compute_s);
  }
  throw std::invalid_argument("exposed_data_parallel_seconds: stage " + std::to_string(stage) + "; the stage is 0..3");
}

}  // namespace dtrain::plan

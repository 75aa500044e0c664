#include <cmath>

#include <nlohmann/json.hpp>

#include "cli/plan/render.h"

namespace dtrain::plan {
namespace {

using nlohmann::json;

// Byte counts as whole numbers (the formulas give fractions of a byte only through P/N).
json bytes(double value) { return static_cast<long long>(std::llround(value)); }

json optional_seconds(const std::optional<double>& s) { return s ? json(*s) : json(nullptr); }

json request_json(const PlanRequest& r) {
  const Workload& w = r.workload;
  const Cluster& c = r.cluster;
  json shape = nullptr;
  if (w.shape)
    shape = {{"layers", w.shape->layers}, {"hidden", w.shape->hidden}, {"heads", w.shape->heads},
             {"kv_heads", w.shape->kv_heads ? w.shape->kv_heads : w.shape->heads}, {"seq_len", w.shape->seq_len},
             {"micro_batch", w.shape->micro_batch}};
  auto bandwidth = [](const std::optional<double>& bw) { return bw ? json(*bw) : json(nullptr); };
  return {{"params", w.params},
          {"model", w.model_name.empty() ? json(nullptr) : json(w.model_name)},
          {"precision", precision_name(w.precision)},
          {"shape", shape},
          {"micro_batch", w.micro_batch_given ? json(w.micro_batch) : json(nullptr)},
          {"framework", framework_name(r.framework)},
          {"zero", r.zero ? json(*r.zero) : json(nullptr)},
          {"recompute", r.recompute ? json(recompute_name(*r.recompute)) : json(nullptr)},
          {"sequence_parallel", r.sequence_parallel},
          {"flash_attention", w.shape ? json(w.shape->flash_attention) : json(nullptr)},
          {"global_batch", w.global_batch ? json(*w.global_batch) : json(nullptr)},
          {"gpus", c.gpus},
          {"gpus_per_node", c.gpus_per_node},
          {"nodes", c.nodes()},
          {"gpu_memory_bytes", bytes(c.gpu_memory)},
          {"usable_bytes", bytes((1 - kHeadroom) * c.gpu_memory)},
          {"intra_node_bw_bytes_per_s", bandwidth(c.intra_node_bw)},
          {"inter_node_bw_bytes_per_s", bandwidth(c.inter_node_bw)},
          {"gpu_flops", bandwidth(c.gpu_flops)},
          {"collective_latency_s", bandwidth(c.collective_latency)},
          {"memory_bw_bytes_per_s", bandwidth(c.memory_bw)},
          {"gpu", c.gpu.empty() ? json(nullptr) : json(c.gpu)},
          {"gpu_peak_flops", bandwidth(c.peak_flops)},
          {"bottleneck", bottleneck_name(r.bottleneck)}};
}

json states_json(const dtrain::trainer::ZeroMemory& m) {
  return {{"params_bytes", m.params}, {"grads_bytes", m.grads}, {"optim_bytes", m.optim},
          {"model_states_bytes", m.params + m.grads + m.optim}};
}

// dtrain-trainer's numbers (Evaluation::trainer): with tensor or pipeline parallelism the largest stage's ("stage"
// names it), and each stage's under "stages"; {"refusal": why} for a layout it does not run; null without
// --trainer-accounting.
json trainer_json(const Evaluation& e) {
  if (!e.trainer_refusal.empty()) return {{"refusal", e.trainer_refusal}};
  json trainer = nullptr;
  if (e.trainer) trainer = states_json(*e.trainer);
  if (e.trainer_activations) {
    if (trainer.is_null()) trainer = json::object();
    trainer["activations_bytes"] = *e.trainer_activations;
  }
  if (e.trainer_stages.empty()) return trainer;
  json stages = json::array();
  int largest = 0;
  for (const TrainerStageMemory& s : e.trainer_stages) {
    json stage = states_json(s.states);
    stage["stage"] = s.stage;
    stage["layers"] = s.layers;
    stage["activation_sets"] = s.activation_sets;
    stage["activations_bytes"] = s.activations;
    stage["total_bytes"] = s.total();
    if (s.total() > e.trainer_stages[largest].total()) largest = s.stage;
    stages.push_back(stage);
  }
  trainer["stage"] = largest;
  trainer["stages"] = stages;
  return trainer;
}

// The predicted step's parts, which add up to step_s: the busy stage's compute (recomputation and the stages'
// imbalance counted), the pipeline's bubble, the tensor-parallel allreduces, the pipeline's sends and tied-embedding
// sum, the data-parallel communication left exposed, and the optimizer step.
json breakdown_json(const Scaling& s) {
  return {{"compute_s", s.compute_s - s.bubble_s},          {"pipeline_bubble_s", s.bubble_s},
          {"tensor_parallel_s", s.tensor_parallel_s},       {"pipeline_transfer_s", s.pipeline_s},
          {"data_parallel_exposed_s", s.data_parallel_exposed_s}, {"optimizer_s", s.optimizer_s},
          {"step_s", s.step_s}};
}

json evaluation_json(const Evaluation& e) {
  const json trainer = trainer_json(e);
  json scaling = nullptr, predicted = nullptr;
  if (e.scaling) {
    scaling = {{"ideal_compute_s", e.scaling->ideal_s}, {"compute_s", e.scaling->compute_s},
               {"exposed_comm_s", e.scaling->exposed_s},
               {"optimizer_s", e.scaling->optimizer_s},
               {"efficiency_serial", e.scaling->efficiency_serial},
               {"efficiency_overlap", e.scaling->efficiency_overlap}};
    predicted = {{"step_s", e.scaling->step_s}, {"tokens_per_s", e.scaling->tokens_per_s},
                 {"tflops_per_gpu", e.scaling->tflops_per_gpu},
                 {"mfu", e.scaling->mfu ? json(*e.scaling->mfu) : json(nullptr)}, {"bubble", e.bubble},
                 {"breakdown", breakdown_json(*e.scaling)}};
  }
  return {{"name", layout_name(e.layout)},
          {"zero_stage", e.layout.stage},
          {"tp", e.layout.tp},
          {"pp", e.layout.pp},
          {"dp", e.dp},
          {"recompute", recompute_name(e.layout.recompute)},
          {"sequence_parallel", e.layout.sequence_parallel},
          {"virtual_stages", e.layout.virtual_stages},
          {"micro_batch", e.layout.micro_batch},
          {"fits", e.fits},
          {"predicted", predicted},
          {"memory",
           {{"params_bytes", bytes(e.states.params)},
            {"grads_bytes", bytes(e.states.grads)},
            {"optim_bytes", bytes(e.states.optim)},
            {"model_states_bytes", bytes(e.states.total())},
            {"activations_bytes", e.activations ? bytes(*e.activations) : json(nullptr)},
            {"total_bytes", bytes(e.total)},
            {"fits", e.fits}}},
          {"trainer", trainer},
          {"accumulation",
           {{"micro_steps", e.accumulation.micro_steps},
            {"global_batch", e.accumulation.global_batch},
            {"exact", e.accumulation.exact}}},
          {"pipeline_bubble", e.bubble},
          {"comm",
           {{"data_parallel_bytes", bytes(e.comm.data_parallel)},
            {"tensor_parallel_bytes", bytes(e.comm.tensor_parallel)},
            {"pipeline_bytes", bytes(e.comm.pipeline)},
            {"data_parallel_crosses_nodes", e.comm.data_parallel_crosses_nodes},
            {"pipeline_crosses_nodes", e.comm.pipeline_crosses_nodes},
            {"latency_s", e.comm.latency_s},
            {"seconds", optional_seconds(e.comm.seconds)},
            {"data_parallel_s", optional_seconds(e.comm.data_parallel_seconds)},
            {"tensor_parallel_s", optional_seconds(e.comm.tensor_parallel_seconds)},
            {"pipeline_s", optional_seconds(e.comm.pipeline_seconds)}}},
          {"scaling", scaling}};
}

json launch_json(const LaunchLines& launch) {
  std::string toml;
  for (const std::string& line : launch.torchtitan) toml += line + "\n";
  return {{"megatron", launch.megatron},     {"megatron_notes", launch.megatron_notes},
          {"torchtitan", toml},              {"torchtitan_notes", launch.torchtitan_notes},
          {"deepspeed", json::parse(launch.deepspeed)}, {"deepspeed_notes", launch.deepspeed_notes}};
}

}  // namespace

std::string render_json(const PlanReport& report) {
  json strategies = json::array(), search = json::array();
  for (const Evaluation& e : report.strategies) strategies.push_back(evaluation_json(e));
  for (const Evaluation& e : report.search) search.push_back(evaluation_json(e));
  const Recommendation& rec = report.recommendation;
  json recommendation = {{"strategy", rec.choice ? evaluation_json(*rec.choice) : json(nullptr)},
                         {"reasons", rec.reasons},
                         {"trainer_args", rec.trainer_args},
                         {"trainer_notes", rec.trainer_notes},
                         {"job_spec", rec.spec_lines},
                         {"launch", rec.launch ? launch_json(*rec.launch) : json(nullptr)}};
  json out = {{"request", request_json(report.request)},
              {"strategies", strategies},
              {"search", search},
              {"recommendation", recommendation}};
  return out.dump(2) + "\n";
}

}  // namespace dtrain::plan

#include "trainer/train/report/step_report.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "trainer/parallel/ddp/reducer.h"
#include "trainer/parallel/zero/engine.h"

namespace dtrain::trainer {

void measure_comm_and_memory(StepMetrics& m, const StepTimes& times, const CommTime& at_start, const DdpReducer* ddp,
                             ZeroEngine* zero, std::uint64_t activation_bytes, int world) {
  if (world > 1) {
    m.comm_ms = comm_time().comm_ms - at_start.comm_ms;
    m.comm_exposed_ms = times.comm_exposed_ms;
    // The exposed time also holds the reduce phases' own work and wake-up latency, so with little communication
    // it can exceed comm_ms: nothing was hidden then.
    m.comm_hidden = *m.comm_ms > 0 ? std::clamp(1.0 - *m.comm_exposed_ms / *m.comm_ms, 0.0, 1.0) : 1.0;
  }
  if (ddp) m.comm_bytes = ddp->last_stats().bytes_sent;
  if (zero) {
    const ZeroStepStats stats = zero->take_stats();
    const ZeroMemory memory = zero->memory();
    m.sharding = ShardingMetrics{memory.params, memory.grads, memory.optim, activation_bytes,
                                 stats.gathered_peak_bytes};
    m.comm_bytes = stats.comm_bytes;
  }
}

double model_flops_per_token(const GptConfig& config, int seq_len, std::uint64_t params) {
  return 6.0 * static_cast<double>(params) + 12.0 * config.num_layers * config.channels * seq_len;
}

HealthReport health_report(const StepMetrics& m, const StepTimes& times, const StepReportTargets& to) {
  HealthReport r;
  r.rank = static_cast<std::uint32_t>(to.rank);
  r.step = m.step;
  r.loss = m.loss;
  // This rank's own throughput (the metrics file has the whole job's).
  r.tokens_per_s = m.tokens_per_s / to.world;
  r.rss_bytes = resident_bytes();
  r.step_ms = m.step_ms;
  r.data_wait_ms = times.data_wait_ms;
  r.compute_ms = times.compute_ms;
  r.comm_exposed_ms = times.comm_exposed_ms;
  r.optimizer_ms = times.optimizer_ms;
  r.pipeline_bubble_ms = times.bubble_ms;
  r.tp_rank = static_cast<std::uint32_t>(to.tp_rank);
  r.tp_size = static_cast<std::uint32_t>(to.tp);
  r.pp_stage = static_cast<std::uint32_t>(to.pp_stage);
  r.pp_size = static_cast<std::uint32_t>(to.pp);
  if (m.sharding) {
    r.mem_params_bytes = m.sharding->mem_params_bytes;
    r.mem_grads_bytes = m.sharding->mem_grads_bytes;
    r.mem_optim_bytes = m.sharding->mem_optim_bytes;
    r.mem_activations_bytes = m.sharding->mem_activations_bytes;
    r.mem_gathered_peak_bytes = m.sharding->mem_gathered_peak_bytes.value_or(0);
  }
  r.comm_bytes = m.comm_bytes.value_or(0);
  r.loss_scale = m.loss_scale.value_or(0);
  r.model_params = to.model_params;
  r.model_flops_per_token = to.model_flops_per_token;
  r.device_name = to.device_name;
  return r;
}

void report_step(const StepMetrics& m, const StepTimes& times, const StepReportTargets& to) {
  if (to.metrics) {
    StepMetrics line = m;
    if (to.pp > 1) line.pp_bubble_ms = times.bubble_ms;
    to.metrics->write(line);
  }
  if (m.step % static_cast<std::uint64_t>(to.log_every) == 0 || m.step == static_cast<std::uint64_t>(to.steps)) {
    spdlog::info("step {}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} tok/s | {:.1f} ms{}", m.step,
                 to.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.step_ms,
                 m.comm_hidden ? fmt::format(" | comm hidden {:.0f}%", 100 * *m.comm_hidden) : std::string());
  }
  // A loss that is not finite ends the run just below, with an error that says so; the agent refuses it in a
  // health report.
  if (to.health && std::isfinite(m.loss)) to.health->report(health_report(m, times, to));
  if (!std::isfinite(m.loss)) {
    throw std::runtime_error("the loss is " + std::to_string(m.loss) + " at step " + std::to_string(m.step) +
                             "; lower --lr or set --grad-clip");
  }
}

}  // namespace dtrain::trainer

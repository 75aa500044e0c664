#include "trainer/train/loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "trainer/ckpt/checkpoint_dir.h"
#include "trainer/ckpt/model_file.h"
#include "trainer/ckpt/state_file.h"
#include "trainer/comm/communicator.h"
#include "trainer/data/loader.h"
#include "trainer/data/prefetch.h"
#include "trainer/health/reporter.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/metrics/jsonl.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/ddp/reducer.h"
#include "trainer/train/checkpointing.h"
#include "trainer/train/collectives.h"
#include "trainer/train/console.h"
#include "trainer/train/error_file.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int env_int(const char* name, int fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  long value = std::strtol(raw, &end, 10);
  return *end == '\0' ? static_cast<int>(value) : fallback;
}

int train(const TrainOptions& o) {
  const int threads = o.threads > 0 ? o.threads : env_int("OMP_NUM_THREADS", 0);
  kernels::set_cpu_threads(threads);

  std::unique_ptr<Communicator> comm = make_communicator_from_env();
  const int rank = comm->rank();
  const int world = comm->size();
  quiet_console_unless_rank0(rank);

  std::optional<GptConfig> file_config;
  if (!o.init_from.empty()) file_config = read_model_header(o.init_from);
  const GptConfig config = resolve_config(o, file_config ? &*file_config : nullptr);
  const int B = o.batch_size;
  const int T = o.seq_len > 0 ? o.seq_len : config.max_seq_len;
  const int K = o.grad_accum;

  DataLoader loader({o.data, B, T, rank, world, K, config.vocab_size});
  for (const std::string& path : loader.skipped()) {
    spdlog::warn("data shard {} is smaller than one step ({} tokens); skipped", path,
                 static_cast<std::size_t>(B) * T * world * K + 1);
  }

  Gpt model(config);
  const std::size_t n = model.num_params();
  AdamW optimizer(model.backend(), n, model.layout().decay_ranges(),
                  AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  const TrainState shape = run_shape(o, config, T, world, n);

  // Rank 0 decides where to start; status: 1 resumed, 0 fresh, -1 failed (every rank then stops).
  const int restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  // A restarted job resumes by itself when it saves checkpoints (or finds some), as if --resume had been given.
  const bool want_resume =
      o.resume || (restart_count > 0 && (o.save_every > 0 || !list_checkpoints(o.checkpoint_dir).empty()));
  StartPoint start;
  float status = 0;
  std::exception_ptr failure;
  if (rank == 0) {
    try {
      std::optional<StartPoint> resumed;
      if (want_resume) resumed = load_newest_checkpoint(o.checkpoint_dir, shape, model, optimizer);
      if (resumed) {
        start = *resumed;
        status = 1;
      } else if (!o.init_from.empty()) {
        std::vector<float> ordered(n);
        read_model_file(o.init_from, config, ordered.data(), n);
        model.layout().from_checkpoint_order(ordered.data(), model.params());
      } else {
        model.init_weights(o.seed);
      }
    } catch (const std::exception&) {
      failure = std::current_exception();
      status = -1;
    }
  }
  status = broadcast_float(*comm, status);
  if (status < 0) {
    if (rank == 0) std::rethrow_exception(failure);
    throw std::runtime_error("rank 0 could not load the starting weights; see rank 0's log");
  }
  if (status > 0) {
    start.step = broadcast_u64(*comm, start.step);
    start.data_step = broadcast_u64(*comm, start.data_step);
  }
  if (world > 1) {
    comm->broadcast(model.params(), n, 0)->wait();
    if (status > 0) {
      comm->broadcast(optimizer.m(), n, 0)->wait();
      comm->broadcast(optimizer.v(), n, 0)->wait();
    }
  }

  LrSchedule schedule;
  schedule.kind = LrSchedule::parse_kind(o.lr_schedule);
  schedule.lr = o.lr;
  schedule.warmup_steps = o.warmup_steps;
  schedule.total_steps = o.steps;
  schedule.min_lr_ratio = o.min_lr_ratio;

  spdlog::info("model {} ({} parameters), batch {} x seq {} x world {} x accum {} = {} tokens per step, {} "
               "threads, backend {}, comm {}",
               config.describe(), n, B, T, world, K, global_batch_tokens(shape), kernels::cpu_threads(),
               model.backend().name(), comm->backend());
  if (status > 0 && !o.init_from.empty()) {
    spdlog::info("--init-from {} is not used: training resumes from {}", o.init_from, start.checkpoint);
  }
  if (start.step >= static_cast<std::uint64_t>(o.steps)) {
    spdlog::info("the checkpoint is at step {}, --steps is {}: nothing to do", start.step, o.steps);
    return 0;
  }

  std::unique_ptr<MetricsWriter> metrics;
  if (rank == 0 && !o.metrics.empty()) {
    if (status > 0) drop_metrics_after(o.metrics, start.step);
    metrics = std::make_unique<MetricsWriter>(o.metrics);
  }
  std::unique_ptr<HealthReporter> health = HealthReporter::from_env();
  std::unique_ptr<DdpReducer> ddp;
  if (world > 1) {
    DdpOptions ddp_options;
    ddp_options.bucket_bytes = static_cast<std::size_t>(o.ddp_bucket_mb * (1 << 20));
    ddp = std::make_unique<DdpReducer>(*comm, model.grads(), n, ddp_options);
  }
  Gpt::GradsReady grads_ready;
  if (ddp) grads_ready = [&](std::size_t offset, std::size_t count) { ddp->grads_ready(offset, count); };

  Prefetcher prefetch(loader, start.data_step, 2 * static_cast<std::size_t>(K));
  const double step_tokens = static_cast<double>(global_batch_tokens(shape));
  const float loss_scale = 1.0f / static_cast<float>(K);
  std::uint64_t data_step = start.data_step;

  for (std::uint64_t step = start.step; step < static_cast<std::uint64_t>(o.steps); ++step) {
    const Clock::time_point began = Clock::now();
    model.zero_grad();
    double loss_sum = 0;
    for (int micro = 0; micro < K; ++micro) {
      Batch batch = prefetch.next();
      loss_sum += model.forward(batch.inputs(), batch.targets(), B, T);
      if (ddp) ddp->begin_backward(micro == K - 1);
      model.backward(loss_scale, grads_ready);
      if (ddp) ddp->finish_backward();
    }
    const float loss = allreduce_sum(*comm, static_cast<float>(loss_sum / K)) / static_cast<float>(world);
    const float grad_norm = clip_grad_norm(model.backend(), model.grads(), n, o.grad_clip);
    const float lr = schedule.at(static_cast<long>(step));
    optimizer.step(model.params(), model.grads(), lr, static_cast<long>(step) + 1);
    ++data_step;

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_ms = ms_since(began);
    m.tokens_per_s = step_tokens / (m.step_ms / 1000.0);
    // Timer noise can make the measured fraction a hair below 0 when nothing overlapped.
    if (ddp) m.comm_hidden = std::clamp(ddp->last_stats().hidden_fraction(), 0.0, 1.0);
    if (metrics) metrics->write(m);
    if (m.step % static_cast<std::uint64_t>(o.log_every) == 0 || m.step == static_cast<std::uint64_t>(o.steps)) {
      spdlog::info("step {}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} tok/s | {:.1f} ms{}", m.step,
                   o.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.step_ms,
                   ddp ? fmt::format(" | comm hidden {:.0f}%", 100 * *m.comm_hidden) : std::string());
    }
    // A loss that is not finite ends the run just below, with an error that says so; the agent refuses it in a
    // health report.
    if (health && std::isfinite(loss)) {
      // This rank's own throughput (the metrics file has the whole job's).
      health->report({static_cast<std::uint32_t>(rank), m.step, m.loss, m.tokens_per_s / world, resident_bytes()});
    }
    if (!std::isfinite(loss)) {
      throw std::runtime_error("the loss is " + std::to_string(loss) + " at step " + std::to_string(m.step) +
                               "; lower --lr or set --grad-clip");
    }
    if (o.save_every > 0 && (m.step % static_cast<std::uint64_t>(o.save_every) == 0 ||
                             m.step == static_cast<std::uint64_t>(o.steps))) {
      TrainState state = shape;
      state.step = m.step;
      state.data_step = data_step;
      save_checkpoint(*comm, o.checkpoint_dir, model, optimizer, state);
    }
  }
  return 0;
}

}  // namespace

int run_training(const TrainOptions& options) {
  try {
    return train(options);
  } catch (const std::invalid_argument& e) {
    spdlog::error("{}", e.what());
    write_error_file(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::string rank = std::getenv("RANK") ? std::string(" (rank ") + std::getenv("RANK") + ")" : "";
    spdlog::error("training failed{}: {}", rank, e.what());
    write_error_file(e.what());
    return 1;
  }
}

}  // namespace dtrain::trainer

#include "trainer/train/setup.h"

#include <cstdint>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "trainer/ckpt/model_file.h"
#include "trainer/common/env.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/parallel/comm_buffers.h"
#include "trainer/train/report/console.h"

namespace dtrain::trainer {

std::unique_ptr<Communicator> start_communicator(const TrainOptions& o, const ComputeDevice& device) {
  int threads = o.threads;
  if (threads <= 0) {
    std::string warning;
    threads = openmp_threads(warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }
  kernels::set_cpu_threads(threads);
  std::unique_ptr<Communicator> comm = device_communicator(device);
  quiet_console_unless_rank0(comm->rank());
  return comm;
}

std::unique_ptr<BufferSource> model_buffers(Communicator& comm, kernels::Backend& backend) {
  const int rank = comm.rank();
  return collective_buffers(comm, backend, [rank](const std::string& message) {
    if (rank == 0) spdlog::warn("{}", message);
  });
}

ParallelGroups start_groups(const RankGrid& grid, int rank) {
  ParallelGroups groups;
  if (grid.tp() == 1 && grid.pp() == 1) return groups;
  const GridCoords place = grid.coords(rank);
  const std::string tp = std::to_string(place.tp), dp = std::to_string(place.dp), pp = std::to_string(place.pp);
  groups.tp = make_group_communicator_from_env(grid.tp_group(rank), "tp-dp" + dp + "-pp" + pp);
  groups.dp = make_group_communicator_from_env(grid.dp_group(rank), "dp-tp" + tp + "-pp" + pp);
  groups.pp = make_group_communicator_from_env(grid.pp_group(rank), "pp-tp" + tp + "-dp" + dp);
  if (grid.pp() > 1 && (place.pp == 0 || place.pp == grid.pp() - 1)) {
    const std::vector<int> ends{grid.rank_of({place.tp, place.dp, 0}), grid.rank_of({place.tp, place.dp, grid.pp() - 1})};
    groups.emb = make_group_communicator_from_env(ends, "emb-tp" + tp + "-dp" + dp);
  }
  return groups;
}

std::unique_ptr<DdpReducer> start_ddp(const TrainOptions& o, Communicator& comm, Gpt& model,
                                      kernels::Dtype comm_dtype) {
  DdpOptions options;
  const std::uint64_t grad_bytes = model.num_params() * sizeof(float);
  options.bucket_bytes = o.ddp_bucket_mb ? static_cast<std::uint64_t>(*o.ddp_bucket_mb * (1 << 20))
                                         : default_bucket_bytes(grad_bytes);
  options.comm_dtype = comm_dtype;
  options.buffers = &model.buffers();
  if (!model.backend().host_accessible()) options.device = &model.backend();
  auto ddp = std::make_unique<DdpReducer>(comm, model.grads(), model.num_params(), options);
  constexpr double kMiB = 1 << 20;
  spdlog::info("DDP: {} gradient buckets over {:.2f} MiB from its end, {:.2f} MiB first, then {:.2f} MiB each ({})",
               ddp->buckets().size(), static_cast<double>(grad_bytes) / kMiB,
               static_cast<double>(options.first_bucket_bytes) / kMiB,
               static_cast<double>(*options.bucket_bytes) / kMiB,
               o.ddp_bucket_mb ? "--ddp-bucket-mb" : "the default, min(25, max(1, gradient MiB / 8)); "
                                                      "--ddp-bucket-mb sets it");
  return ddp;
}

Recompute recompute_mode(const TrainOptions& o) {
  if (o.recompute == "selective") return Recompute::selective;
  if (o.recompute == "full") return Recompute::full;
  return Recompute::none;
}

GptConfig model_config(const TrainOptions& o) {
  std::optional<GptConfig> file_config;
  if (!o.init_from.empty()) file_config = read_model_header(o.init_from);
  return resolve_config(o, file_config ? &*file_config : nullptr);
}

DataLoader open_data(const TrainOptions& o, int B, int T, int rank, int world, const GptConfig& config) {
  const int K = o.grad_accum;
  DataLoader loader({o.data, B, T, rank, world, K, config.vocab_size});
  for (const std::string& path : loader.skipped()) {
    spdlog::warn("data shard {} is smaller than one step ({} tokens); skipped", path,
                 static_cast<std::size_t>(B) * T * world * K + 1);
  }
  return loader;
}

LrSchedule lr_schedule(const TrainOptions& o) {
  LrSchedule schedule;
  schedule.kind = LrSchedule::parse_kind(o.lr_schedule);
  schedule.lr = o.lr;
  schedule.warmup_steps = o.warmup_steps;
  schedule.total_steps = o.steps;
  schedule.min_lr_ratio = o.min_lr_ratio;
  return schedule;
}

}  // namespace dtrain::trainer

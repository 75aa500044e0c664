#include "cli/plan/measured/remedies.h"

#include <algorithm>
#include <cstdio>

namespace dtrain::plan {
namespace {

// (N - 1)/N: what sharding over the N data-parallel ranks frees of a part each rank held whole.
double sharded_away(const MeasuredRun& m) {
  const double n = static_cast<double>(std::max<std::size_t>(m.ranks, 1));
  return (n - 1) / n;
}

// What ZeRO stage 1, 2 or 3 shards, and what it costs in communication (the ZeRO paper's analysis).
struct ZeroStage {
  const char* shards;
  const char* traffic;
  const char* fsdp_strategy;  // a script's FSDP sharding strategy; "" for ZeroRedundancyOptimizer
};
constexpr ZeroStage kZeroStages[] = {
    {"the optimizer state", "as much communication as DDP", ""},
    {"the optimizer state and the gradients",
     "as much communication as DDP (with gradient accumulation, a reduce-scatter every micro-step)", "SHARD_GRAD_OP"},
    {"the optimizer state, the gradients and the parameters",
     "1.5x DDP's communication (the parameters are all-gathered for forward and again for backward)", "FULL_SHARD"},
};

std::vector<std::string> zero_lines(const MeasuredRun& m, int stage) {
  if (m.trainer) return {"--zero " + std::to_string(stage)};
  const std::string strategy = kZeroStages[stage - 1].fsdp_strategy;
  if (strategy.empty()) {
    return {"from torch.distributed.optim import ZeroRedundancyOptimizer",
            "optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=...)"};
  }
  return {"from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy",
          "model = FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy." + strategy +
              ")   # in place of DistributedDataParallel(model)",
          "optimizer = torch.optim.AdamW(model.parameters(), lr=...)   # after wrapping: over the shards"};
}

// What `frees` bytes allow: a larger micro-batch, sized only from the run's own activations.
std::string larger_batch_text(const MeasuredRun& m, std::uint64_t frees) {
  const MeasuredMemory& mem = m.memory;
  if (mem.activations_bytes == 0 || m.model.batch <= 0) {
    return "room for a larger micro-batch (the run reports no activations, so no size is given; `dtrain plan` with "
           "the model's shape estimates them)";
  }
  const double per_sequence = static_cast<double>(mem.activations_bytes) / m.model.batch;
  const auto more = static_cast<long long>(static_cast<double>(frees) / per_sequence);
  return "room for about " + std::to_string(more) + " more sequence(s) per micro-batch (activations " +
         bytes_text(static_cast<std::uint64_t>(per_sequence)) + " a sequence at the run's micro-batch of " +
         std::to_string(m.model.batch) + ", taken as linear in it)";
}

}  // namespace

std::string bytes_text(std::uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) std::snprintf(text, sizeof text, "%.1f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(text, sizeof text, "%.1f MB", b / 1e6);
  else std::snprintf(text, sizeof text, "%.0f kB", b / 1e3);
  return text;
}

std::vector<Remedy> data_remedies(const MeasuredRun& m) {
  if (m.trainer) {
    return {{"the trainer's loader reads ahead of the step; its wait is the disk or the page cache: put the shards "
             "on local storage and warm them",
             m.data_wait_ms, 0, "", {"--data /local/disk/shards/*.bin"}}};
  }
  return {{"load batches in worker processes, pinned, a few ahead, so the wait hides behind compute",
           m.data_wait_ms, 0, "",
           {"DataLoader(dataset, batch_size=..., num_workers=4, pin_memory=True, prefetch_factor=2, "
            "persistent_workers=True)"}}};
}

std::vector<Remedy> comm_remedies(const MeasuredRun& m) {
  const double accumulated = m.comm_exposed_ms * (kAccumulation - 1) / kAccumulation;
  const std::string k = std::to_string(kAccumulation);
  std::vector<Remedy> out;
  if (m.trainer) {
    out.push_back({"accumulate " + k + " micro-steps per optimizer step: one gradient reduction per " + k +
                       " micro-batches (per sample, this much less each step)",
                   accumulated, 0, "", {"--grad-accum " + k, "--batch-size <the same>"}});
    out.push_back({"smaller gradient buckets start the reduction earlier in backward", m.comm_exposed_ms / 2, 0, "",
                   {"--ddp-bucket-mb 4"}});
  } else {
    out.push_back({"accumulate " + k + " micro-steps, without synchronising the first " +
                       std::to_string(kAccumulation - 1) + " (DDP's no_sync)",
                   accumulated, 0, "",
                   {"for i, batch in enumerate(loader):", "    ctx = model.no_sync() if (i + 1) % " + k +
                                                              " else contextlib.nullcontext()",
                    "    with ctx: (loss_fn(model(batch)) / " + k + ").backward()",
                    "    if (i + 1) % " + k + " == 0: optimizer.step(); optimizer.zero_grad()"}});
    out.push_back({"smaller gradient buckets start the reduction earlier in backward", m.comm_exposed_ms / 2, 0, "",
                   {"DistributedDataParallel(model, bucket_cap_mb=4)"}});
  }
  if (m.nodes > 1) {
    out.push_back({"each rank on its nearest NIC, the job's traffic on the fast network", 0, 0,
                   "no gain claimed: the measurement does not say which link the exposed communication crossed; "
                   "compare `dtrain bench allreduce`'s busbw across the nodes with the NICs' line rate",
                   {"dtrain topo   # on each node: the NICs nearest each GPU, and the NCCL_IB_HCA and "
                    "NCCL_SOCKET_IFNAME dtrain sets",
                    "nccl: {auto: true}   # job spec (the default): every rank gets NCCL_IB_HCA=<its node's "
                    "GPU-near NICs>",
                    "nodes: {interface: <the fast network's interface>}   # job spec: NCCL_SOCKET_IFNAME and "
                    "GLOO_SOCKET_IFNAME",
                    "dtrain bench allreduce   # as a job's command on the same nodes: busbw across them"}});
  }
  return out;
}

std::string plan_command(const MeasuredRun& m) {
  const TrainerModel& t = m.model;
  std::string line = "dtrain plan";
  const auto flag = [&](const char* name, long long value) {
    line += std::string(" ") + name + " " + std::to_string(value);
  };
  if (t.params > 0 && t.layers > 0 && t.hidden > 0 && t.heads > 0 && t.seq_len > 0 && t.vocab > 0) {
    flag("--layers", t.layers);
    flag("--hidden", t.hidden);
    flag("--heads", t.heads);
    flag("--seq-len", t.seq_len);
    flag("--vocab", t.vocab);
  } else if (t.params > 0) {
    flag("--params", static_cast<long long>(t.params));
  } else {
    line += " --params <the model's parameters: not recorded>";
  }
  if (t.batch > 0) {
    flag("--micro-batch", t.batch);
    flag("--global-batch", static_cast<long long>(t.batch) * std::max(t.grad_accum, 1) *
                               static_cast<long long>(m.ranks));
  }
  flag("--gpus", static_cast<long long>(m.ranks));
  flag("--gpus-per-node", static_cast<long long>(m.ranks_per_node));
  if (!m.precision.empty()) line += " --precision " + m.precision;
  return line + " --bottleneck communication";
}

std::vector<Remedy> layout_remedies(const MeasuredRun& m) {
  const double params = static_cast<double>(m.model.params);
  if (m.nodes < 2 || (params > 0 && params <= kLargeModelParams)) return {};
  char size[96];
  if (params > 0) std::snprintf(size, sizeof size, "%.3g parameters", params);
  else std::snprintf(size, sizeof size, "a model whose parameter count the run does not record");
  char bound[64];
  std::snprintf(bound, sizeof bound, "%.1f ms", m.comm_exposed_ms);
  std::vector<std::string> lines = {plan_command(m)};
  if (params == 0) {
    lines.push_back("# with the shape (--layers --hidden --heads --seq-len) for tensor/pipeline layouts: without it "
                    "the plan searches ZeRO stages only");
  }
  lines.push_back("# --gpu <preset> or --inter-node-bw <busbw of `dtrain bench allreduce`, GB/s> for step times");
  lines.push_back(m.trainer ? "# dtrain-trainer has no TP/PP: the plan's Megatron-LM, torchtitan or DeepSpeed lines "
                              "run the layout"
                            : "# the plan gives Megatron-LM, torchtitan and DeepSpeed lines for the layout");
  return {{"tensor parallelism within a node, pipeline across nodes (Narayanan et al.): the data-parallel "
           "gradient of " + std::string(size) + " crosses the network smaller, or not at all",
           0, 0,
           "no gain claimed: it removes at most the whole exposed communication (" + std::string(bound) +
               " a step), and the measurement does not split that between the nodes' own links and the network; "
               "`dtrain plan` predicts the layout's step",
           lines}};
}

std::vector<Remedy> optimizer_remedies(const MeasuredRun& m) {
  const double gain = m.optimizer_ms * sharded_away(m);
  if (m.trainer) return {{"ZeRO-1 shards the optimizer's update over the ranks", gain, 0, "", {"--zero 1"}}};
  return {{"ZeRO-1 shards the optimizer's update over the ranks", gain, 0, "",
           {"from torch.distributed.optim import ZeroRedundancyOptimizer",
            "optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=...)"}}};
}

std::vector<Remedy> compute_remedies(const MeasuredRun& m) {
  if (m.trainer && m.precision != "fp32") return {};
  if (m.trainer) {
    return {{"bf16 mixed precision: 16-bit matrix products where the hardware has 16-bit units", m.compute_ms / 2, 0,
             "", {"--precision bf16"}}};
  }
  return {{"bf16 mixed precision (autocast), where the hardware has 16-bit matrix units", m.compute_ms / 2, 0, "",
           {"with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16): loss = loss_fn(model(batch))"}}};
}

std::vector<Remedy> memory_remedies(const MeasuredRun& m) {
  const MeasuredMemory& mem = m.memory;
  if (mem.states == StatesSource::not_recorded || m.ranks < 2) return {};
  const std::uint64_t parts[] = {mem.optim_bytes, mem.grads_bytes, mem.params_bytes};  // sharded from stage 1, 2, 3
  const std::string ranks = std::to_string(m.ranks);
  std::uint64_t whole_parts = 0;  // of the parts a stage shards, what the job holds whole
  std::vector<Remedy> out;
  for (int stage = 1; stage <= 3; ++stage) {
    if (stage <= m.zero_stage) continue;
    whole_parts += parts[stage - 1];
    const auto frees = static_cast<std::uint64_t>(static_cast<double>(whole_parts) * sharded_away(m));
    const std::uint64_t rank = mem.rank_bytes();
    if (frees == 0 || (rank > 0 && static_cast<double>(frees) < kWorthShare * static_cast<double>(rank))) continue;
    const ZeroStage& z = kZeroStages[stage - 1];
    const std::string what = "ZeRO-" + std::to_string(stage) + " shards " + z.shards + " over the " + ranks +
                             " ranks (" + std::to_string(m.ranks - 1) + "/" + ranks + " of the " +
                             bytes_text(whole_parts) +
                             " a rank holds of them now" + (m.trainer ? "" : ", taken as a DDP script's, unsharded") +
                             "), with " + z.traffic + "; " + larger_batch_text(m, frees);
    out.push_back({what, 0, frees, "", zero_lines(m, stage)});
  }
  return out;
}

void order_remedies(std::vector<Remedy>& remedies) {
  std::stable_sort(remedies.begin(), remedies.end(), [](const Remedy& x, const Remedy& y) {
    if (x.is_memory() != y.is_memory()) return !x.is_memory();
    return x.is_memory() ? x.frees_bytes > y.frees_bytes : x.gain_ms > y.gain_ms;
  });
}

}  // namespace dtrain::plan

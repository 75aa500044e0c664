#include "cli/plan/measured/measured_run.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "cli/report/model/rank_sample.h"
#include "cli/report/model/run_model.h"

namespace dtrain::plan {
namespace {

constexpr int kAccumulation = 4;      // the micro-steps the accumulation remedy proposes
constexpr double kWorthShare = 0.10;  // a part under 10% of the step gets no remedy

// dtrain-trainer's --precision in the job's command, "fp32" without it; "" for other programs.
std::string trainer_precision(const std::vector<std::string>& command) {
  std::string joined;
  for (const std::string& word : command) joined += word + " ";
  if (joined.find("dtrain-trainer") == std::string::npos) return "";
  for (const char* p : {"bf16", "fp16"}) {
    if (joined.find(std::string("--precision ") + p) != std::string::npos) return p;
  }
  return "fp32";
}

// The samples of the job's last round, of `only` ranks when it is not empty.
MeasuredRun measure(const report::RunModel& model, const std::set<unsigned>& only = {}) {
  MeasuredRun m;
  m.dir = model.dir;
  m.job_id = model.job_id;
  m.precision = trainer_precision(model.command);
  m.trainer = !m.precision.empty();
  m.ranks = model.ranks();
  std::set<unsigned> nodes;
  for (const auto& [rank, node] : model.node_of) nodes.insert(node);
  m.nodes = nodes.size();
  std::uint32_t last_round = 0;
  for (const auto& window : model.samples) last_round = std::max(last_round, window.round);
  std::vector<double> step, data, compute, comm, optim, tokens;
  for (const auto& window : model.samples) {
    if (window.round != last_round) continue;
    for (const auto& s : window.ranks) {
      if (s.step_ms <= 0 || (!only.empty() && only.count(s.rank) == 0)) continue;
      step.push_back(s.step_ms);
      data.push_back(s.data_wait_ms);
      compute.push_back(s.compute_ms);
      comm.push_back(s.comm_exposed_ms);
      optim.push_back(s.optimizer_ms);
      tokens.push_back(s.tokens_per_s);
    }
  }
  m.samples = step.size();
  m.step_ms = report::median_of(step);
  m.data_wait_ms = report::median_of(data);
  m.compute_ms = report::median_of(compute);
  m.comm_exposed_ms = report::median_of(comm);
  m.optimizer_ms = report::median_of(optim);
  m.tokens_per_s = report::median_of(tokens) * static_cast<double>(m.ranks);
  return m;
}

std::vector<Remedy> data_remedies(const MeasuredRun& m) {
  if (m.trainer) {
    return {{"the trainer's loader reads ahead of the step; its wait is the disk or the page cache: put the shards "
             "on local storage and warm them",
             m.data_wait_ms, {"--data /local/disk/shards/*.bin"}}};
  }
  return {{"load batches in worker processes, pinned, a few ahead, so the wait hides behind compute",
           m.data_wait_ms,
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
                   accumulated, {"--grad-accum " + k, "--batch-size <the same>"}});
    out.push_back({"smaller gradient buckets start the reduction earlier in backward", m.comm_exposed_ms / 2,
                   {"--ddp-bucket-mb 4"}});
  } else {
    out.push_back({"accumulate " + k + " micro-steps, without synchronising the first " +
                       std::to_string(kAccumulation - 1) + " (DDP's no_sync)",
                   accumulated,
                   {"for i, batch in enumerate(loader):", "    ctx = model.no_sync() if (i + 1) % " + k +
                                                              " else contextlib.nullcontext()",
                    "    with ctx: (loss_fn(model(batch)) / " + k + ").backward()",
                    "    if (i + 1) % " + k + " == 0: optimizer.step(); optimizer.zero_grad()"}});
    out.push_back({"smaller gradient buckets start the reduction earlier in backward", m.comm_exposed_ms / 2,
                   {"DistributedDataParallel(model, bucket_cap_mb=4)"}});
  }
  if (m.nodes > 1) {
    out.push_back({"each rank on its nearest NIC: `dtrain topo` prints NCCL_IB_HCA per local rank", 0,
                   {"nccl: {env: {NCCL_IB_HCA: <from dtrain topo>}}   # job spec"}});
  }
  return out;
}

std::vector<Remedy> optimizer_remedies(const MeasuredRun& m) {
  const double dp = static_cast<double>(std::max<std::size_t>(m.ranks, 1));
  const double gain = m.optimizer_ms * (dp - 1) / dp;
  if (m.trainer) return {{"ZeRO-1 shards the optimizer's update over the ranks", gain, {"--zero 1"}}};
  return {{"ZeRO-1 shards the optimizer's update over the ranks", gain,
           {"from torch.distributed.optim import ZeroRedundancyOptimizer",
            "optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=...)"}}};
}

std::vector<Remedy> compute_remedies(const MeasuredRun& m) {
  if (m.trainer && m.precision != "fp32") return {};
  if (m.trainer) {
    return {{"bf16 mixed precision: 16-bit matrix products where the hardware has 16-bit units", m.compute_ms / 2,
             {"--precision bf16"}}};
  }
  return {{"bf16 mixed precision (autocast), where the hardware has 16-bit matrix units", m.compute_ms / 2,
           {"with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16): loss = loss_fn(model(batch))"}}};
}

}  // namespace

Result<RunAdvice> advise_from_run(const std::string& dir) {
  auto model = report::read_run(dir);
  if (!model.ok()) return {{model.status.code(), "--from " + dir + ": " + model.status.message()}};
  RunAdvice a;
  a.run = measure(model.value);
  // A straggler (the launcher's diagnosis, in status.json) makes every other rank wait in the gradient reduction:
  // their exposed communication is its slowness. The bottleneck and the remedies are then the straggler's own.
  const std::vector<unsigned> stragglers = model.value.stragglers();
  if (!stragglers.empty()) {
    const std::set<unsigned> slow(stragglers.begin(), stragglers.end());
    MeasuredRun own = measure(model.value, slow);
    if (own.samples > 0) {
      own.ranks = a.run.ranks;
      own.nodes = a.run.nodes;
      own.tokens_per_s = a.run.tokens_per_s;
      a.stragglers = stragglers;
      a.run = own;
    }
  }
  const MeasuredRun& m = a.run;
  if (m.samples == 0 || m.step_ms <= 0) {
    return {{StatusCode::not_found, "--from " + dir + ": the job reported no step times (its workers sent no health "
                                    "reports with step_ms: dtrain-trainer, dtrain_health, or instrument: auto)"}};
  }
  const std::pair<const char*, double> parts[] = {{"data", m.data_wait_ms},
                                                  {"communication", m.comm_exposed_ms},
                                                  {"optimizer", m.optimizer_ms},
                                                  {"compute", m.compute_ms}};
  const auto* largest = std::max_element(std::begin(parts), std::end(parts), [&](const auto& x, const auto& y) {
    // A straggler's own communication is the others' waiting for it, not its bottleneck.
    const bool skip_x = !a.stragglers.empty() && std::string(x.first) == "communication";
    const bool skip_y = !a.stragglers.empty() && std::string(y.first) == "communication";
    return skip_x || (!skip_y && x.second < y.second);
  });
  a.bottleneck = largest->first;
  a.bottleneck_share = largest->second / m.step_ms;
  if (m.data_wait_ms >= kWorthShare * m.step_ms) a.remedies = data_remedies(m);
  if (a.stragglers.empty() && m.comm_exposed_ms >= kWorthShare * m.step_ms) {
    for (Remedy& r : comm_remedies(m)) a.remedies.push_back(std::move(r));
  }
  if (m.optimizer_ms >= kWorthShare * m.step_ms) {
    for (Remedy& r : optimizer_remedies(m)) a.remedies.push_back(std::move(r));
  }
  if (m.compute_ms >= kWorthShare * m.step_ms) {
    for (Remedy& r : compute_remedies(m)) a.remedies.push_back(std::move(r));
  }
  std::stable_sort(a.remedies.begin(), a.remedies.end(),
                   [](const Remedy& x, const Remedy& y) { return x.gain_ms > y.gain_ms; });
  return {{}, std::move(a)};
}

std::string straggler_text(const RunAdvice& a) {
  if (a.stragglers.empty()) return "";
  std::string ranks;
  for (unsigned r : a.stragglers) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return " of straggler rank(s) " + ranks + " (the launcher's diagnosis; the step above is theirs, and every other "
         "rank waits for them in the gradient reduction)";
}

std::string render_advice_text(const RunAdvice& a) {
  const MeasuredRun& m = a.run;
  char head[512];
  std::snprintf(head, sizeof head,
                "dtrain plan --from %s: job %s, %zu ranks on %zu node(s), %s\n"
                "a step: %.1f ms (median of %zu samples): data wait %.1f, compute %.1f, exposed communication %.1f, "
                "optimizer %.1f; %.0f tokens/s\n"
                "bottleneck: %s, %.0f%% of a step%s\n",
                m.dir.c_str(), m.job_id.c_str(), m.ranks, m.nodes,
                m.trainer ? ("dtrain-trainer, " + m.precision).c_str() : "a script", m.step_ms, m.samples,
                m.data_wait_ms, m.compute_ms, m.comm_exposed_ms, m.optimizer_ms, m.tokens_per_s,
                a.bottleneck.c_str(), 100 * a.bottleneck_share, straggler_text(a).c_str());
  std::string out = head;
  if (a.remedies.empty()) out += "no part of the step is worth a remedy (each under 10% or already addressed)\n";
  for (const Remedy& r : a.remedies) {
    char gain[64];
    std::snprintf(gain, sizeof gain, "up to %.1f ms a step (%.0f%%)", r.gain_ms, 100 * r.gain_ms / m.step_ms);
    out += "\n- " + r.what + ": " + (r.gain_ms > 0 ? std::string(gain) : std::string("gain not measured")) + "\n";
    for (const std::string& line : r.lines) out += "    " + line + "\n";
  }
  return out;
}

std::string render_advice_json(const RunAdvice& a) {
  const MeasuredRun& m = a.run;
  nlohmann::json remedies = nlohmann::json::array();
  for (const Remedy& r : a.remedies) remedies.push_back({{"what", r.what}, {"gain_ms", r.gain_ms}, {"lines", r.lines}});
  const nlohmann::json out = {
      {"run", {{"dir", m.dir}, {"job", m.job_id}, {"trainer", m.trainer}, {"precision", m.precision},
               {"ranks", m.ranks}, {"nodes", m.nodes}, {"samples", m.samples}, {"step_ms", m.step_ms},
               {"data_wait_ms", m.data_wait_ms}, {"compute_ms", m.compute_ms},
               {"comm_exposed_ms", m.comm_exposed_ms}, {"optimizer_ms", m.optimizer_ms},
               {"tokens_per_s", m.tokens_per_s}}},
      {"bottleneck", a.bottleneck},
      {"stragglers", a.stragglers},
      {"bottleneck_share", a.bottleneck_share},
      {"remedies", remedies}};
  return out.dump(2) + "\n";
}

}  // namespace dtrain::plan

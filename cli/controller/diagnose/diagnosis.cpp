#include "cli/controller/diagnose/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>

namespace dtrain::controller {

using report::RankSample;

namespace {

std::string percent(double share) { return std::to_string(std::lround(share * 100.0)) + "%"; }

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

double share_of(double part, double whole) { return whole > 0 ? part / whole : 0; }

// The median of `sorted` without its element at `skip`.
double median_without(const std::vector<double>& sorted, std::size_t skip) {
  const std::size_t n = sorted.size() - 1;
  const auto at = [&](std::size_t k) { return sorted[k < skip ? k : k + 1]; };
  return n % 2 == 1 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

// The time a rank waited for its peers: exposed communication and a pipeline stage's bubble.
double waited_ms(const RankSample& s) { return s.comm_exposed_ms + s.pipeline_bubble_ms; }

// A rank's step time; without step_ms, the parts it reported.
double step_of(const RankSample& s) { return s.step_ms > 0 ? s.step_ms : s.own_work_ms() + waited_ms(s); }

double unaccounted_ms(const RankSample& s) { return s.step_ms - (s.own_work_ms() + waited_ms(s)); }

}  // namespace

std::string rank_list(const std::vector<unsigned>& ranks) {
  constexpr std::size_t kShown = 8;
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > kShown) out += " and " + std::to_string(ranks.size() - kShown) + " more";
  return out;
}

RankSample sample_of(const WorkerHealth& h) {
  return {.rank = h.rank, .step = h.step, .step_ms = h.step_ms, .loss = h.loss, .tokens_per_s = h.tokens_per_s,
          .data_wait_ms = h.data_wait_ms, .compute_ms = h.compute_ms, .comm_exposed_ms = h.comm_exposed_ms,
          .optimizer_ms = h.optimizer_ms, .rss_bytes = h.rss_bytes, .device_mem_used_bytes = h.device_mem_used_bytes,
          .device_mem_total_bytes = h.device_mem_total_bytes, .pipeline_bubble_ms = h.pipeline_bubble_ms,
          .grid = grid_place_of(h)};
}

const char* to_string(DiagnosisKind kind) {
  switch (kind) {
    case DiagnosisKind::straggler: return "straggler";
    case DiagnosisKind::data_loading: return "data_loading";
    case DiagnosisKind::communication: return "communication";
    case DiagnosisKind::memory: return "memory";
    case DiagnosisKind::sync: return "sync";
    case DiagnosisKind::pipeline_bubble: return "pipeline_bubble";
    case DiagnosisKind::hang: return "hang";
  }
  return "?";
}

void Diagnoser::place(unsigned rank, RankPlace place) {
  places_[rank] = std::move(place);
  rss_.erase(rank);
}

void Diagnoser::node_memory(unsigned node, std::uint64_t total_bytes) {
  if (total_bytes > 0) {
    node_ram_[node] = total_bytes;
  } else {
    node_ram_.erase(node);
  }
}

void Diagnoser::add(unsigned rank, const RankSample& sample) {
  // Resident memory is a level, not a per-step cost: a heartbeat's is as current as a step's.
  if (sample.rss_bytes > 0) rss_[rank] = sample.rss_bytes;
  if (sample.grid.split()) grid_[rank] = sample.grid;
  series_[rank].open.add(sample);
}

std::string Diagnoser::on_node(unsigned rank) const {
  auto it = places_.find(rank);
  if (it == places_.end()) return "";
  return " on node " + std::to_string(it->second.node) + " (" + it->second.host + ")";
}

std::string Diagnoser::where(unsigned rank) const {
  const auto grid = grid_.find(rank);
  return rank_name(rank, grid == grid_.end() ? GridPlace{} : grid->second) + on_node(rank);
}

std::vector<unsigned> Diagnoser::close_windows() {
  std::vector<unsigned> out;
  for (auto& [rank, s] : series_) {
    ++s.evaluations;
    if (s.open.steps() < kMinWindowSteps && (s.open.steps() < 2 || s.evaluations < kMaxWindowEvaluations)) continue;
    s.closed = s.open.take();
    s.evaluations = 0;
    out.push_back(rank);
  }
  return out;
}

void Diagnoser::evaluate() {
  const std::vector<unsigned> fresh = close_windows();
  // Every rank's latest window, closed now or before: a rank whose window is still filling keeps its diagnosis.
  Latest latest;
  latest.reserve(series_.size());
  for (const auto& [rank, s] : series_) {
    if (s.closed) latest.emplace_back(rank, &*s.closed);
  }
  find_stragglers(fresh, latest);
  find_bottlenecks(latest);
  find_full_nodes();
}

// Stragglers among the ranks of each pipeline stage: stages do different work (the last one the output head, the first
// the embedding), so a stage is only compared with the ranks that run the same layers.
void Diagnoser::find_stragglers(const std::vector<unsigned>& fresh, const Latest& latest) {
  std::map<unsigned, std::pair<std::vector<unsigned>, Latest>> stages;
  for (const auto& [rank, m] : latest) stages[m->grid.pipelined() ? m->grid.pp_stage : 0].second.emplace_back(rank, m);
  for (unsigned rank : fresh) {
    const std::optional<RankSample>& m = series_.at(rank).closed;
    stages[m && m->grid.pipelined() ? m->grid.pp_stage : 0].first.push_back(rank);
  }
  for (const auto& [stage, group] : stages) find_stragglers_among(group.first, group.second);
}

void Diagnoser::find_stragglers_among(const std::vector<unsigned>& fresh, const Latest& latest) {
  std::vector<const RankSample*> ranks;   // every rank with a breakdown: the peers
  std::vector<double> sorted;
  std::vector<double> steps;
  for (const auto& [rank, m] : latest) {
    if (!m->has_breakdown()) continue;
    ranks.push_back(m);
    sorted.push_back(m->own_work_ms());
    steps.push_back(step_of(*m));
  }
  if (ranks.size() < 2) return;
  std::sort(sorted.begin(), sorted.end());
  // The job's step time: an excess of own work smaller than a share of it is jitter, not what the job waits for.
  const double least_excess = kStragglerExcessShare * report::median_of(std::move(steps));
  // The peers' breakdown fields, each sorted once per evaluation: a named rank's peers' median is then its field's
  // median without the rank's own value, as own work's is (no pass over every rank per straggler).
  constexpr double RankSample::*kFields[] = {&RankSample::data_wait_ms, &RankSample::compute_ms,
                                             &RankSample::optimizer_ms, &RankSample::step_ms};
  std::vector<std::vector<double>> fields;
  for (unsigned rank : fresh) {
    Series& s = series_.at(rank);
    const RankSample& own = *s.closed;
    if (!own.has_breakdown()) continue;
    const double work = own.own_work_ms();
    const auto skip = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), work) - sorted.begin());
    const double median = median_without(sorted, skip);
    s.above = median > 0 && work > ratio_ * median && work - median >= least_excess ? s.above + 1 : 0;
    if (s.above < kStragglerWindows) continue;
    // The peers' typical breakdown, to find the part of the step where this rank loses its time.
    if (fields.empty()) {
      for (const auto field : kFields) {
        std::vector<double> values;
        values.reserve(ranks.size());
        for (const RankSample* other : ranks) values.push_back(other->*field);
        std::sort(values.begin(), values.end());
        fields.push_back(std::move(values));
      }
    }
    RankSample peers;
    for (std::size_t f = 0; f < std::size(kFields); ++f) {
      const std::vector<double>& values = fields[f];
      const auto at = std::lower_bound(values.begin(), values.end(), own.*kFields[f]);
      peers.*kFields[f] = median_without(values, static_cast<std::size_t>(at - values.begin()));
    }
    stragglers_[rank] = straggler(rank, own, peers, work / median - 1);
  }
}

Diagnosis Diagnoser::straggler(unsigned rank, const RankSample& own, const RankSample& peers, double slower) const {
  // The cause is a part of its own work: exposed communication is time spent waiting for others (a straggler's is
  // usually the smallest of all), so a slow rank is never slow "by" it.
  struct Part {
    double excess;
    const char* name;
    double own_ms, peers_ms;
  };
  const Part parts[] = {
      {own.data_wait_ms - peers.data_wait_ms, "data wait", own.data_wait_ms, peers.data_wait_ms},
      {own.compute_ms - peers.compute_ms, "compute", own.compute_ms, peers.compute_ms},
      {own.optimizer_ms - peers.optimizer_ms, "optimizer", own.optimizer_ms, peers.optimizer_ms}};
  const Part& cause = *std::max_element(std::begin(parts), std::end(parts),
                                        [](const Part& a, const Part& b) { return a.excess < b.excess; });
  const double own_step = own.step_ms > 0 ? own.step_ms : own.own_work_ms();
  const double peers_step = peers.step_ms > 0 ? peers.step_ms : peers.own_work_ms();
  Diagnosis d;
  d.kind = DiagnosisKind::straggler;
  d.ranks = {rank};
  d.message = where(rank) + " was " + percent(slower) + " slower than the median: " +
              percent(share_of(cause.own_ms, own_step)) + " of its step was " + cause.name + " (the median rank's: " +
              percent(share_of(cause.peers_ms, peers_step)) + ")";
  const auto place = places_.find(rank);
  const std::string node = place == places_.end() ? "its node" : "node " + std::to_string(place->second.node);
  if (std::string(cause.name) == "data wait") {
    d.fix = "its data loader: more DataLoader workers (num_workers), pin_memory=True, persistent_workers=True; "
            "check " + node + "'s disk or network file system";
  } else {
    d.fix = "a slow or throttled device, or CPU contention on " + node + ": check clocks and temperature "
            "(`dtrain doctor`, nvidia-smi -q -d PERFORMANCE), and other processes on its CPUs (top); replace the "
            "node if it stays slow";
  }
  return d;
}

void Diagnoser::find_bottlenecks(const Latest& means) {
  bottlenecks_.clear();
  // Every rank above the share, worst first; the message names the worst.
  const auto above = [&](double limit, const std::function<double(const RankSample&)>& share) {
    std::vector<std::pair<double, unsigned>> found;
    for (const auto& [rank, m] : means) {
      if (const double s = share(*m); s > limit) found.emplace_back(s, rank);
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return found;
  };
  const auto add = [&](DiagnosisKind kind, const std::vector<std::pair<double, unsigned>>& found,
                       const std::string& what, const std::string& fix) {
    if (found.empty()) return;
    Diagnosis d{kind, {}, "", fix};
    for (const auto& f : found) d.ranks.push_back(f.second);
    d.message = what + " is " + percent(found.front().first) + " of " + where(found.front().second) + "'s step";
    if (found.size() > 1) d.message += "; above " + what + "'s limit on " + rank_list(d.ranks);
    bottlenecks_.push_back(std::move(d));
  };
  const auto data = above(kDataWaitShare, [](const RankSample& m) { return share_of(m.data_wait_ms, m.step_ms); });
  unsigned cpus = 0;
  if (!data.empty()) {
    if (auto p = places_.find(data.front().second); p != places_.end()) cpus = p->second.cpus;
  }
  add(DiagnosisKind::data_loading, data, "data wait",
      "feed the step faster: torch DataLoader(num_workers=" +
          (cpus > 1 ? std::to_string(cpus - 1) + " (the rank's " + std::to_string(cpus) +
                          " CPUs, OMP_NUM_THREADS, less one for the training loop)"
                    : std::string("the rank's CPUs less one")) +
          ", pin_memory=True, prefetch_factor=4, persistent_workers=True); pre-tokenize and shard the data");
  std::string waiting;
  if (!stragglers_.empty()) {
    std::vector<unsigned> slow;
    for (const auto& [rank, d] : stragglers_) slow.push_back(rank);
    waiting = " (first fix the straggler, " + rank_list(slow) + ": its peers' exposed communication is mostly waiting for it)";
  }
  add(DiagnosisKind::communication,
      above(kCommShare, [](const RankSample& m) { return share_of(m.comm_exposed_ms, m.step_ms); }),
      "exposed communication",
      "check the bandwidth with `dtrain run -n WORLD -- dtrain bench allreduce`; on InfiniBand make sure NCCL uses it "
      "(NCCL_IB_HCA, `dtrain topo`); bigger DDP buckets (bucket_cap_mb, dtrain-trainer --ddp-bucket-mb) overlap "
      "more of it with backward; gradient accumulation communicates once per K micro-steps" + waiting);
  const auto memory = above(kMemoryShare, [](const RankSample& m) {
    return share_of(static_cast<double>(m.device_mem_used_bytes), static_cast<double>(m.device_mem_total_bytes));
  });
  add(DiagnosisKind::memory, memory, "device memory",
      "shard the model state (ZeRO / FSDP: dtrain-trainer --zero 1..3), use mixed precision (AMP, --precision "
      "bf16), or a smaller micro-batch with gradient accumulation");
  if (!memory.empty()) {
    const RankSample& m = *series_.at(memory.front().second).closed;
    bottlenecks_.back().message += " (" + gib(m.device_mem_used_bytes) + " of " + gib(m.device_mem_total_bytes) + ")";
  }
  add(DiagnosisKind::sync, above(kSyncShare, [](const RankSample& m) {
        return m.has_breakdown() ? share_of(unaccounted_ms(m), m.step_ms) : 0.0;
      }),
      "time that no phase accounts for",
      "look for host-device synchronisation in the step (.item(), .cpu(), printing tensors), logging or "
      "checkpointing every step, and barriers between steps");
  find_bubbles(means);
}

// The host side of memory: ranks of one node share its RAM, so a node runs out long before any one rank looks big.
// Judged on the latest reports, not windows: a rank that is still starting already holds its memory.
void Diagnoser::find_full_nodes() {
  struct Node {
    std::uint64_t rss = 0;
    std::string host;
    std::vector<std::pair<std::uint64_t, unsigned>> ranks;   // (rss, rank), only for a node found full
  };
  // The sums first, every evaluation; the ranks only of a node found full (thousands of nodes, rarely one full).
  std::map<unsigned, Node> nodes;
  for (const auto& [rank, bytes] : rss_) {
    const auto place = places_.find(rank);
    if (place == places_.end() || node_ram_.count(place->second.node) == 0) continue;
    nodes[place->second.node].rss += bytes;
  }
  for (auto it = nodes.begin(); it != nodes.end();) {
    const double share = share_of(static_cast<double>(it->second.rss), static_cast<double>(node_ram_.at(it->first)));
    it = share > kMemoryShare ? std::next(it) : nodes.erase(it);
  }
  if (nodes.empty()) return;
  for (const auto& [rank, bytes] : rss_) {
    const auto place = places_.find(rank);
    if (place == places_.end()) continue;
    if (auto n = nodes.find(place->second.node); n != nodes.end()) {
      n->second.host = place->second.host;
      n->second.ranks.emplace_back(bytes, rank);
    }
  }
  for (auto& [node, n] : nodes) {
    const std::uint64_t ram = node_ram_.at(node);
    const double share = share_of(static_cast<double>(n.rss), static_cast<double>(ram));
    // Largest first, then by rank.
    std::sort(n.ranks.begin(), n.ranks.end(),
              [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    Diagnosis d{DiagnosisKind::memory, {}, "", ""};
    for (const auto& r : n.ranks) d.ranks.push_back(r.second);
    d.message = "the resident memory of the ranks on node " + std::to_string(node) + " (" + n.host + ") is " +
                gib(n.rss) + ", " + percent(share) + " of its " + gib(ram) + " of RAM (" + rank_list(d.ranks) + ")";
    d.fix = "use less host memory per rank: shard the model state (ZeRO stage 2 or 3: dtrain-trainer --zero 2|3, or "
            "FSDP), use mixed precision (AMP, --precision bf16), a smaller micro-batch with gradient accumulation; "
            "or run fewer ranks on node " + std::to_string(node) + " (workers_per_node)";
    bottlenecks_.push_back(std::move(d));
  }
}

void Diagnoser::hang(unsigned rank, const std::string& what) {
  hangs_[rank] = Diagnosis{DiagnosisKind::hang, {rank}, where(rank) + " " + what,
                           "its stacks (attempt_<n>/stacks/rank_" + std::to_string(rank) +
                               ".txt) show where it stopped; a collective that never completes points at a peer "
                               "that is missing or at the network"};
}

std::vector<Diagnosis> Diagnoser::diagnoses() const {
  std::vector<Diagnosis> out;
  for (const auto& [rank, d] : stragglers_) out.push_back(d);
  out.insert(out.end(), bottlenecks_.begin(), bottlenecks_.end());
  for (const auto& [rank, d] : hangs_) out.push_back(d);
  return out;
}

std::optional<WindowMeans> Diagnoser::means(unsigned rank) const {
  auto it = series_.find(rank);
  if (it == series_.end() || (!it->second.closed && it->second.open.steps() == 0)) return std::nullopt;
  WindowMeans w;
  // The last closed window; until one closed, the steps so far.
  w.mean = it->second.closed ? *it->second.closed : it->second.open.mean();
  w.data_wait_ratio = share_of(w.mean.data_wait_ms, w.mean.step_ms);
  w.comm_exposed_ratio = share_of(w.mean.comm_exposed_ms, w.mean.step_ms);
  w.pipeline_bubble_ratio = share_of(w.mean.pipeline_bubble_ms, w.mean.step_ms);
  return w;
}

}  // namespace dtrain::controller

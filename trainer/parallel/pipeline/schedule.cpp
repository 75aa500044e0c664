#include "trainer/parallel/pipeline/schedule.h"

#include <algorithm>
#include <stdexcept>

namespace dtrain::trainer {
namespace {

std::string n(int value) { return std::to_string(value); }

std::string op_name(const PipeOp& op, bool with_chunk) {
  std::string text = (op.kind == PipeOp::forward ? "F" : "B") + n(op.micro);
  if (with_chunk) text += "." + n(op.chunk);
  return text;
}

// Megatron-LM's interleaved order of a rank's m*V forward passes (m a multiple of P): virtual micro-batch k is in
// group k / (P*V) of P micro-batches; within the group, chunk (k % (P*V)) / P, micro-batch group * P + k % P.
PipeOp interleaved_forward(int k, int stages, int virtual_stages) {
  const int group = k / (stages * virtual_stages);
  const int in_group = k % (stages * virtual_stages);
  return {PipeOp::forward, group * stages + k % stages, in_group / stages};
}

// The backward of virtual micro-batch k: the same micro-batch order, the chunks reversed.
PipeOp interleaved_backward(int k, int stages, int virtual_stages) {
  PipeOp op = interleaved_forward(k, stages, virtual_stages);
  op.kind = PipeOp::backward;
  op.chunk = virtual_stages - 1 - op.chunk;
  return op;
}

// Warm-up forwards, then a forward and a backward alternately, then the cool-down backwards; forward(k) and
// backward(k) give the k-th of each.
template <typename Forward, typename Backward>
std::vector<PipeOp> warmup_steady_cooldown(int total, int warmup, Forward forward, Backward backward) {
  std::vector<PipeOp> ops;
  ops.reserve(2 * static_cast<size_t>(total));
  for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(forward(warmup + k));
    ops.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  return ops;
}

struct OpState {
  bool done = false;
  double end_ms = 0;
};

// The simulator's state: each (kind, micro, global chunk)'s end time once run, and each rank's position and clock.
class Simulation {
 public:
  Simulation(const std::vector<std::vector<PipeOp>>& per_rank, int micro_batches, int virtual_stages,
             const PipeCosts& costs)
      : ranks_(per_rank), m_(micro_batches), v_(virtual_stages), p_(static_cast<int>(per_rank.size())),
        costs_(costs), forward_(static_cast<size_t>(m_) * p_ * v_), backward_(forward_.size()),
        next_(per_rank.size(), 0), clock_(per_rank.size(), 0.0), busy_(per_rank.size(), 0.0) {}

  PipeTimeline run();

 private:
  struct Need {
    const OpState* state;
    std::string what;  // "F3.1 on rank 2"
    bool other_rank;
  };
  OpState& state(PipeOp::Kind kind, int micro, int global) {
    return (kind == PipeOp::forward ? forward_ : backward_)[static_cast<size_t>(micro) * p_ * v_ + global];
  }
  std::vector<Need> needs(int rank, const PipeOp& op);
  bool try_run(int rank);
  std::string stuck();

  const std::vector<std::vector<PipeOp>>& ranks_;
  int m_, v_, p_;
  PipeCosts costs_;
  std::vector<OpState> forward_, backward_;
  std::vector<size_t> next_;
  std::vector<double> clock_, busy_;
};

std::vector<Simulation::Need> Simulation::needs(int rank, const PipeOp& op) {
  const int global = op.chunk * p_ + rank;
  const bool with_chunk = v_ > 1;
  auto need = [&](PipeOp::Kind kind, int g) {
    const int owner = g % p_;
    return Need{&state(kind, op.micro, g), op_name({kind, op.micro, g / p_}, with_chunk) + " on rank " + n(owner),
                owner != rank};
  };
  std::vector<Need> list;
  if (op.kind == PipeOp::forward) {
    if (global > 0) list.push_back(need(PipeOp::forward, global - 1));
    return list;
  }
  if (global + 1 < p_ * v_) list.push_back(need(PipeOp::backward, global + 1));
  list.push_back(need(PipeOp::forward, global));
  return list;
}

bool Simulation::try_run(int rank) {
  const std::vector<PipeOp>& ops = ranks_[rank];
  if (next_[rank] >= ops.size()) return false;
  const PipeOp& op = ops[next_[rank]];
  double start = clock_[rank];
  for (const Need& need : needs(rank, op)) {
    if (!need.state->done) return false;
    start = std::max(start, need.state->end_ms + (need.other_rank ? costs_.p2p_ms : 0.0));
  }
  const double cost = op.kind == PipeOp::forward ? costs_.forward_ms : costs_.backward_ms;
  OpState& mine = state(op.kind, op.micro, op.chunk * p_ + rank);
  mine.done = true;
  mine.end_ms = start + cost;
  clock_[rank] = mine.end_ms;
  busy_[rank] += cost;
  ++next_[rank];
  return true;
}

std::string Simulation::stuck() {
  std::string text;
  for (int r = 0; r < p_; ++r) {
    if (next_[r] >= ranks_[r].size()) continue;
    const PipeOp& op = ranks_[r][next_[r]];
    std::string waits;
    for (const Need& need : needs(r, op)) {
      if (!need.state->done) waits += (waits.empty() ? "" : " and ") + need.what;
    }
    text += (text.empty() ? "" : "; ") + std::string("rank ") + n(r) + " at op " + n(static_cast<int>(next_[r])) +
            " (" + op_name(op, v_ > 1) + ") waits for " + waits;
  }
  return text;
}

PipeTimeline Simulation::run() {
  size_t remaining = 0;
  for (const auto& ops : ranks_) remaining += ops.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < p_; ++r) {
      while (try_run(r)) {
        progressed = true;
        --remaining;
      }
    }
    if (!progressed) {
      throw std::logic_error("the pipeline schedule deadlocks, no rank can progress: " + stuck() +
                             ". Each rank must run a micro-batch's forward before its backward, and in an order "
                             "its neighbours' schedules can feed");
    }
  }
  PipeTimeline timeline;
  timeline.busy_ms = busy_;
  double busy = 0;
  for (int r = 0; r < p_; ++r) {
    timeline.step_ms = std::max(timeline.step_ms, clock_[r]);
    busy += busy_[r];
  }
  timeline.bubble_fraction = busy > 0 ? (timeline.step_ms * p_ - busy) / busy : 0.0;
  return timeline;
}

// Each rank's list holds each (micro, chunk)'s forward and backward exactly once.
void check_op_lists(const std::vector<std::vector<PipeOp>>& per_rank, int micro_batches, int virtual_stages) {
  if (per_rank.empty() || micro_batches < 1 || virtual_stages < 1) {
    throw std::invalid_argument("simulating a pipeline needs 1 or more ranks' op lists (got " +
                                n(static_cast<int>(per_rank.size())) + "), micro-batches (got " + n(micro_batches) +
                                ") and virtual stages (got " + n(virtual_stages) + ")");
  }
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::vector<int> seen(2 * static_cast<size_t>(micro_batches) * virtual_stages, 0);
    for (const PipeOp& op : per_rank[r]) {
      const std::string where = "rank " + n(static_cast<int>(r)) + "'s " + op_name(op, true);
      if (op.micro < 0 || op.micro >= micro_batches || op.chunk < 0 || op.chunk >= virtual_stages) {
        throw std::invalid_argument(where + " is outside " + n(micro_batches) + " micro-batches x " +
                                    n(virtual_stages) + " chunks");
      }
      const size_t slot = (static_cast<size_t>(op.micro) * virtual_stages + op.chunk) * 2 + op.kind;
      if (++seen[slot] > 1) throw std::invalid_argument(where + " appears twice; each op runs once a step");
    }
    if (per_rank[r].size() != seen.size()) {
      throw std::invalid_argument("rank " + n(static_cast<int>(r)) + " runs " +
                                  n(static_cast<int>(per_rank[r].size())) + " ops, not the " +
                                  n(static_cast<int>(seen.size())) + " of a forward and a backward for each of " +
                                  n(micro_batches) + " micro-batches x " + n(virtual_stages) + " chunks");
    }
  }
}

}  // namespace

PipeSchedule parse_pipe_schedule(const std::string& name) {
  if (name == "gpipe") return PipeSchedule::gpipe;
  if (name == "1f1b") return PipeSchedule::one_f_one_b;
  if (name == "interleaved") return PipeSchedule::interleaved;
  throw std::invalid_argument("pipeline schedule '" + name + "' is not one of gpipe, 1f1b, interleaved");
}

const char* pipe_schedule_name(PipeSchedule schedule) {
  switch (schedule) {
    case PipeSchedule::gpipe: return "gpipe";
    case PipeSchedule::one_f_one_b: return "1f1b";
    case PipeSchedule::interleaved: return "interleaved";
  }
  return "unknown";
}

void check_interleaving(int layers, int stages, int virtual_stages, int micro_batches) {
  const std::string v = "--pp-virtual " + std::to_string(virtual_stages) + ": ";
  if (stages <= 1) throw std::invalid_argument(v + "virtual stages interleave a pipeline; it needs --pp above 1");
  if (layers % (stages * virtual_stages) != 0)
    throw std::invalid_argument(v + "the model's " + std::to_string(layers) +
                                " layers do not divide into --pp x --pp-virtual = " +
                                std::to_string(stages * virtual_stages) + " chunks of equal size");
  check_pipeline_args(PipeSchedule::interleaved, stages, micro_batches, virtual_stages);
}

void check_pipeline_args(PipeSchedule schedule, int stages, int micro_batches, int virtual_stages) {
  if (stages < 1 || micro_batches < 1 || virtual_stages < 1) {
    throw std::invalid_argument("pipeline of " + n(stages) + " stages, " + n(micro_batches) + " micro-batches, " +
                                n(virtual_stages) + " virtual stages: each must be 1 or more");
  }
  if (schedule != PipeSchedule::interleaved && virtual_stages > 1) {
    throw std::invalid_argument(std::string(pipe_schedule_name(schedule)) + " with " + n(virtual_stages) +
                                " virtual stages: only the interleaved schedule splits a stage into chunks; use "
                                "interleaved or 1 virtual stage");
  }
  if (schedule == PipeSchedule::interleaved && virtual_stages < 2) {
    throw std::invalid_argument("the interleaved schedule with " + n(virtual_stages) +
                                " virtual stage needs 2 or more model chunks per stage; with 1 use 1f1b");
  }
  if (schedule == PipeSchedule::interleaved && micro_batches % stages != 0) {
    throw std::invalid_argument("the interleaved schedule needs the micro-batches (" + n(micro_batches) +
                                ") to be a multiple of the pipeline stages (" + n(stages) +
                                "), as Megatron-LM does: use " + n((micro_batches / stages + 1) * stages) +
                                " micro-batches, or 1f1b");
  }
}

std::vector<PipeOp> pipeline_schedule(PipeSchedule schedule, int stages, int stage, int micro_batches,
                                      int virtual_stages) {
  check_pipeline_args(schedule, stages, micro_batches, virtual_stages);
  if (stage < 0 || stage >= stages) {
    throw std::invalid_argument("pipeline stage " + n(stage) + " is outside 0.." + n(stages - 1));
  }
  const int m = micro_batches;
  auto forward = [](int k) { return PipeOp{PipeOp::forward, k, 0}; };
  auto backward = [](int k) { return PipeOp{PipeOp::backward, k, 0}; };
  switch (schedule) {
    case PipeSchedule::gpipe: return warmup_steady_cooldown(m, m, forward, backward);
    case PipeSchedule::one_f_one_b:
      return warmup_steady_cooldown(m, std::min(stages - stage - 1, m), forward, backward);
    case PipeSchedule::interleaved: break;
  }
  const int total = m * virtual_stages;
  const int warmup = std::min((stages - stage - 1) * 2 + (virtual_stages - 1) * stages, total);
  return warmup_steady_cooldown(
      total, warmup, [&](int k) { return interleaved_forward(k, stages, virtual_stages); },
      [&](int k) { return interleaved_backward(k, stages, virtual_stages); });
}

int activation_sets(PipeSchedule schedule, int stages, int stage, int micro_batches, int virtual_stages) {
  int live = 0;
  int most = 0;
  for (const PipeOp& op : pipeline_schedule(schedule, stages, stage, micro_batches, virtual_stages)) {
    live += op.kind == PipeOp::forward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

double ideal_bubble_fraction(int stages, int micro_batches, int virtual_stages) {
  if (stages < 1 || micro_batches < 1 || virtual_stages < 1) {
    throw std::invalid_argument("pipeline of " + n(stages) + " stages, " + n(micro_batches) + " micro-batches, " +
                                n(virtual_stages) + " virtual stages: each must be 1 or more");
  }
  return static_cast<double>(stages - 1) / (static_cast<double>(virtual_stages) * micro_batches);
}

std::string describe_schedule(const std::vector<PipeOp>& ops) {
  const bool with_chunk = std::any_of(ops.begin(), ops.end(), [](const PipeOp& op) { return op.chunk != 0; });
  std::string text;
  for (const PipeOp& op : ops) text += (text.empty() ? "" : " ") + op_name(op, with_chunk);
  return text;
}

PipeTimeline simulate_pipeline_ops(const std::vector<std::vector<PipeOp>>& per_rank, int micro_batches,
                                   int virtual_stages, const PipeCosts& costs) {
  check_op_lists(per_rank, micro_batches, virtual_stages);
  if (costs.forward_ms < 0 || costs.backward_ms < 0 || costs.p2p_ms < 0) {
    throw std::invalid_argument("pipeline costs forward " + std::to_string(costs.forward_ms) + " ms, backward " +
                                std::to_string(costs.backward_ms) + " ms, p2p " + std::to_string(costs.p2p_ms) +
                                " ms: none may be negative");
  }
  return Simulation(per_rank, micro_batches, virtual_stages, costs).run();
}

PipeTimeline simulate_pipeline(PipeSchedule schedule, int stages, int micro_batches, int virtual_stages,
                               const PipeCosts& costs) {
  check_pipeline_args(schedule, stages, micro_batches, virtual_stages);
  std::vector<std::vector<PipeOp>> per_rank;
  for (int s = 0; s < stages; ++s) {
    per_rank.push_back(pipeline_schedule(schedule, stages, s, micro_batches, virtual_stages));
  }
  return simulate_pipeline_ops(per_rank, micro_batches, virtual_stages, costs);
}

}  // namespace dtrain::trainer

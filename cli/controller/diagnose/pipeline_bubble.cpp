// The pipeline_bubble diagnosis (diagnosis.h): a pipeline stage that waits for its neighbours for more than
// kBubbleShare of its step. The bubble is the pipeline's own cost, not a fault of the network or of a slow rank: its
// ideal share with P stages and m micro-batches per step is (P-1)/m of the compute (GPipe and 1F1B alike, (P-1)/(V m)
// with V interleaved chunks per stage; Narayanan et al., arXiv:2104.04473, section 2.2), so the fix is more
// micro-batches, more chunks, or fewer stages.

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cli/controller/diagnose/diagnosis.h"

namespace dtrain::controller {
namespace {

std::string percent_of(double share) { return std::to_string(std::lround(share * 100.0)) + "%"; }

// The micro-batches per step that bring the ideal bubble (P-1)/m under kBubbleShare with `stages` stages.
int enough_micro_batches(unsigned stages) {
  return static_cast<int>(std::floor((stages - 1) / Diagnoser::kBubbleShare)) + 1;
}

}  // namespace

void Diagnoser::find_bubbles(const Latest& means) {
  std::vector<std::pair<double, unsigned>> found;   // (bubble / step, rank), worst first
  for (const auto& [rank, m] : means) {
    if (m->step_ms <= 0 || m->pipeline_bubble_ms <= 0) continue;
    if (const double share = m->pipeline_bubble_ms / m->step_ms; share > kBubbleShare) found.emplace_back(share, rank);
  }
  if (found.empty()) return;
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  const unsigned worst = found.front().second;
  const auto place = grid_.find(worst);
  const GridPlace grid = place == grid_.end() ? GridPlace{} : place->second;
  Diagnosis d{DiagnosisKind::pipeline_bubble, {}, "", ""};
  for (const auto& f : found) d.ranks.push_back(f.second);
  d.message = "pipeline bubble is " + percent_of(found.front().first) + " of the step";
  if (grid.pipelined()) {
    d.message += " on stage " + std::to_string(grid.pp_stage) + " of " + std::to_string(grid.pp_size) + " (rank " +
                 std::to_string(worst) +
                 (grid.tp_size > 1 ? ", tensor-parallel rank " + std::to_string(grid.tp_rank) + " of " +
                                         std::to_string(grid.tp_size) + "," : "") +
                 on_node(worst) + ")";
  } else {
    d.message += " of " + where(worst);
  }
  d.message += ": the time it waits for its neighbour stages' activations and gradients";
  if (found.size() > 1) d.message += "; above " + percent_of(kBubbleShare) + " on " + rank_list(d.ranks);
  // (P-1)/m is under the share once m is above (P-1) / share: 4 x (P-1) at 25%.
  const std::string least =
      grid.pipelined() ? " (--grad-accum " + std::to_string(enough_micro_batches(grid.pp_size)) + " or more with " +
                             std::to_string(grid.pp_size) + " stages)"
                       : "";
  d.fix = "more micro-batches per step: with P stages and m micro-batches (dtrain-trainer --grad-accum m) the ideal "
          "bubble is (P-1)/m of the compute, so m above " + std::to_string(std::lround(1 / kBubbleShare)) +
          " x (P-1) brings it under " + percent_of(kBubbleShare) + least + "; with that many micro-batches use "
          "--pp-schedule 1f1b rather than gpipe, which keeps at most P micro-batches' activations per stage instead "
          "of m; interleaved stages (--pp-virtual V) make the bubble 1/V as large; or fewer stages (--pp), with data "
          "or tensor parallelism for the rest";
  bottlenecks_.push_back(std::move(d));
}

}  // namespace dtrain::controller

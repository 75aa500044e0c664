// A trial's measures and a candidate's verdict (measure.h).

#include "cli/tune/measure.h"

#include <algorithm>
#include <cmath>

namespace dtrain::tune {
namespace {

std::string ended_early(const RankTrial& r, int needed) {
  if (r.steps == 0) {
    return "rank " + std::to_string(r.rank) + " ended without an optimizer step: dtrain tune counts the steps of "
           "torch.optim optimizers (step()), and the script made none";
  }
  return "rank " + std::to_string(r.rank) + " ended after " + std::to_string(r.steps) + " optimizer step(s); a "
         "trial needs --warmup-steps + --trial-steps = " + std::to_string(needed) + ": give the script more steps "
         "(more data or epochs) or lower those";
}

}  // namespace

std::string trial_problem(const TrialRun& run, const TrialSettings& s) {
  const int needed = s.warmup + s.steps;
  if (run.interrupted) return "interrupted";
  if (run.stopped) return "stopped at its deadline";
  if (run.exit_code != 0) {
    return "exited with code " + std::to_string(run.exit_code) + (run.tail.empty() ? "" : ": " + run.tail);
  }
  // Exit 0 before the last step: the script ran out of steps.
  for (const auto& r : run.ranks) {
    if (!r.complete) return ended_early(r, needed);
  }
  const int world = run.world > 0 ? run.world : static_cast<int>(run.ranks.size());
  if (world == 0) return "no rank wrote a trial line (is the program a PyTorch script or dtrain-trainer?)";
  for (int rank = 0; rank < world; ++rank) {
    const auto it = std::find_if(run.ranks.begin(), run.ranks.end(), [rank](const RankTrial& r) {
      return r.rank == rank;
    });
    if (it == run.ranks.end()) {
      return "rank " + std::to_string(rank) + " wrote no trial line: it never imported torch under dtrain's "
             "bootstrap (health.instrument: off?), or its output was lost";
    }
    if (static_cast<int>(it->step_s.size()) != s.steps) {
      return "rank " + std::to_string(rank) + " measured " + std::to_string(it->step_s.size()) + " steps, not " +
             std::to_string(s.steps);
    }
  }
  return "";
}

std::string unit_of(const TrialRun& run) {
  auto all = [&run](auto counted) {
    return !run.ranks.empty() && std::all_of(run.ranks.begin(), run.ranks.end(), counted);
  };
  if (all([](const RankTrial& r) { return r.tokens && *r.tokens > 0; })) return "tokens";
  if (all([](const RankTrial& r) { return r.samples && *r.samples > 0; })) return "samples";
  return "steps";
}

TrialMeasure measure_trial(const TrialRun& run, const std::string& unit) {
  TrialMeasure m;
  m.seconds = run.seconds;
  m.run_dir = run.run_dir;
  const std::size_t n = run.ranks.empty() ? 0 : run.ranks.front().step_s.size();
  m.steps.step_s.assign(n, 0);
  double units = 0;
  std::vector<double> data, comm;
  for (const auto& r : run.ranks) {
    for (std::size_t i = 0; i < n && i < r.step_s.size(); ++i) m.steps.step_s[i] = std::max(m.steps.step_s[i],
                                                                                             r.step_s[i]);
    if (unit == "tokens") units += r.tokens.value_or(0);
    else if (unit == "samples") units += r.samples.value_or(0);
    const double steps = std::max<double>(1, static_cast<double>(r.step_s.size()));
    data.push_back(r.data_wait_s * 1e3 / steps);
    comm.push_back(r.comm_s * 1e3 / steps);
    m.memory_bytes = std::max(m.memory_bytes, r.device_peak_bytes > 0 ? r.device_peak_bytes : r.rss_bytes);
    m.losses[r.rank] = r.losses;
  }
  m.steps.units_per_step = unit == "steps" || n == 0 ? 1 : units / static_cast<double>(n);
  m.data_wait_ms = median(data);
  m.comm_ms = median(comm);
  return m;
}

double median_of(const std::vector<TrialMeasure>& trials, double TrialMeasure::*measure) {
  std::vector<double> values;
  for (const auto& t : trials) values.push_back(t.*measure);
  return median(std::move(values));
}

bool losses_agree(const TrialMeasure& a, const TrialMeasure& b) {
  for (const auto& [rank, losses] : a.losses) {
    const auto other = b.losses.find(rank);
    if (other == b.losses.end()) continue;
    for (std::size_t i = 0; i < losses.size() && i < other->second.size(); ++i) {
      if (!losses[i] || !other->second[i]) continue;
      const double x = *losses[i], y = *other->second[i];
      if (std::abs(x - y) > kLossTolerance * std::max(1.0, std::abs(y))) return false;
    }
  }
  return true;
}

void judge(CandidateResult& c, const CandidateResult& baseline, bool seeded) {
  std::vector<TrialSteps> mine, theirs;
  for (const auto& t : c.trials) mine.push_back(t.steps);
  for (const auto& t : baseline.trials) theirs.push_back(t.steps);
  c.rate = median_rate(mine);
  if (&c == &baseline) return;
  if (!mine.empty()) c.speed = speed_up(mine, theirs);
  if (c.trials.empty() || baseline.trials.empty()) return;
  if (!seeded) {
    c.loss_check = "n/a";
    return;
  }
  const bool same = std::all_of(c.trials.begin(), c.trials.end(), [&baseline](const TrialMeasure& t) {
    return losses_agree(t, baseline.trials.front());
  });
  c.loss_check = same ? "same" : "differs";
  if (!same && c.status == "measured") {
    c.status = "loss_changed";
    c.note = "its first losses differ from the baseline's (beyond 1e-4 relative): it changes what the script "
             "computes";
  }
}

}  // namespace dtrain::tune

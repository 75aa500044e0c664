// The hierarchical bootstrap of stats.h.

#include "cli/tune/stats.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace dtrain::tune {
namespace {

constexpr std::uint64_t kSeed = 0x7475'6e65;   // "tune"

std::vector<const TrialSteps*> with_steps(const std::vector<TrialSteps>& trials) {
  std::vector<const TrialSteps*> out;
  for (const auto& t : trials) {
    if (!t.step_s.empty()) out.push_back(&t);
  }
  return out;
}

// One resample's median rate: trials drawn with replacement, then each one's steps.
double resampled_rate(const std::vector<const TrialSteps*>& trials, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> pick_trial(0, trials.size() - 1);
  std::vector<double> rates;
  rates.reserve(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const TrialSteps& trial = *trials[pick_trial(rng)];
    std::uniform_int_distribution<std::size_t> pick_step(0, trial.step_s.size() - 1);
    double total = 0;
    for (std::size_t s = 0; s < trial.step_s.size(); ++s) total += trial.step_s[pick_step(rng)];
    const double mean = total / static_cast<double>(trial.step_s.size());
    rates.push_back(mean > 0 ? trial.units_per_step / mean : 0);
  }
  return median(std::move(rates));
}

double percentile(std::vector<double>& sorted, double p) {
  const double at = p * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (at - static_cast<double>(below));
}

}  // namespace

double TrialSteps::rate() const {
  double total = 0;
  for (double s : step_s) total += s;
  return total > 0 ? units_per_step * static_cast<double>(step_s.size()) / total : 0;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double median_rate(const std::vector<TrialSteps>& trials) {
  std::vector<double> rates;
  for (const auto* t : with_steps(trials)) rates.push_back(t->rate());
  return median(std::move(rates));
}

SpeedUp speed_up(const std::vector<TrialSteps>& candidate, const std::vector<TrialSteps>& baseline) {
  const auto c = with_steps(candidate);
  const auto b = with_steps(baseline);
  SpeedUp out;
  const double base = median_rate(baseline);
  if (c.empty() || b.empty() || base <= 0) return out;
  out.ratio = median_rate(candidate) / base;
  std::mt19937_64 rng(kSeed);
  std::vector<double> ratios;
  ratios.reserve(kResamples);
  for (std::size_t i = 0; i < kResamples; ++i) {
    const double cand = resampled_rate(c, rng);
    const double basel = resampled_rate(b, rng);
    if (basel > 0) ratios.push_back(cand / basel);
  }
  if (ratios.empty()) return out;
  std::sort(ratios.begin(), ratios.end());
  out.low = percentile(ratios, 0.025);
  out.high = percentile(ratios, 0.975);
  return out;
}

}  // namespace dtrain::tune

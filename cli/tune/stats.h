#pragma once

// How `dtrain tune` tells a speed-up from noise. A knob's trials and the baseline's are interleaved (session.h), so
// that a slow minute of a shared machine falls on both; each is repeated (--repeats). A configuration's rate is the
// median of its trials' rates; a candidate's speed-up is its rate over the baseline's.
//
// The 95% interval of a speed-up is a hierarchical (two-level) percentile bootstrap (Davison & Hinkley, "Bootstrap
// Methods and their Application", 1997, section 3.8): each of kResamples resamples draws the configuration's trials
// with replacement, then each drawn trial's measured steps with replacement, takes each drawn trial's rate (units
// per step over its mean step time) and their median, for the candidate and the baseline alike; the interval is the
// 2.5th and 97.5th percentiles of the resampled ratios. Drawing trials keeps the variation between trials (what a
// noisy machine adds) in the interval; drawing steps keeps the variation within one. With one trial on a side only
// its steps vary, and the interval says less than with three. A speed-up is reported only when the interval
// excludes 1.0. The generator is seeded with a constant: the same trials give the same interval.

#include <cstddef>
#include <vector>

namespace dtrain::tune {

inline constexpr std::size_t kResamples = 2000;

// One trial's measured steps: the job's time of each (the slowest rank's) and its units (tokens, samples or 1) a step.
struct TrialSteps {
  std::vector<double> step_s;
  double units_per_step = 1;

  double rate() const;   // units per second over the trial's measured steps; 0 when it has none
};

struct SpeedUp {
  double ratio = 1;      // median rate of the candidate over the baseline's
  double low = 1;        // the 95% interval
  double high = 1;

  bool faster() const { return low > 1.0; }
  bool slower() const { return high < 1.0; }
};

double median(std::vector<double> values);   // 0 for none

// The median of the trials' rates.
double median_rate(const std::vector<TrialSteps>& trials);

// The candidate's speed-up over the baseline with its interval (above); trials without steps are left out, and a
// side with none gives {1, 1, 1}.
SpeedUp speed_up(const std::vector<TrialSteps>& candidate, const std::vector<TrialSteps>& baseline);

}  // namespace dtrain::tune

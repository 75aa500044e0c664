#pragma once

// From a trial's lines to its measures (session.h's TrialMeasure), and from a candidate's trials to its verdict:
// the speed-up over the baseline (stats.h) and the loss check.
//
// The loss check compares, rank by rank, the losses of a trial's first steps (trial.h's "losses") with those of the
// first baseline trial: the same script from the same seeds computes the same losses whatever the knobs that do not
// change the numerics, up to the order of floating-point sums (threads, buckets, a communication backend). So they
// must agree within kLossTolerance relative (|a - b| <= tolerance * max(1, |b|)) on every step both know. A trial
// outside it "differs": the knob changed what the script computes (a dataset drawing random numbers in worker
// processes, for one), and it is not recommended. When the baseline's own trials differ (a script that is not
// seeded), the check cannot tell and says "n/a" for every candidate.

#include <string>

#include "cli/tune/session.h"

namespace dtrain::tune {

inline constexpr double kLossTolerance = 1e-4;

// Why a trial cannot be measured ("" when it can): no run, a non-zero exit, a rank without its line, a rank that
// ended before the last step. `world` is the job's rank count when known (0: the trial's own).
std::string trial_problem(const TrialRun& run, const TrialSettings& settings);

// The job's unit: tokens when every rank counted tokens, else samples when every rank counted samples, else steps.
std::string unit_of(const TrialRun& run);

// The measures of a complete trial (trial_problem() == "").
TrialMeasure measure_trial(const TrialRun& run, const std::string& unit);

bool losses_agree(const TrialMeasure& a, const TrialMeasure& b);

// The median over `trials` of one of their measures (data_wait_ms, comm_ms, memory_bytes); 0 for none.
double median_of(const std::vector<TrialMeasure>& trials, double TrialMeasure::*measure);

// The candidate's rate, speed-up over `baseline` and loss check (`seeded`: the baseline's trials agree).
void judge(CandidateResult& candidate, const CandidateResult& baseline, bool seeded);

}  // namespace dtrain::tune

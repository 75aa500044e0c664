#pragma once

// `dtrain tune`'s trials: the job run for short trials, the baseline and candidates interleaved and repeated, within
// a budget. The order, for R repeats and candidates c1..cK chosen from the first baseline trial (candidates.h):
//
//   baseline, c1 .. cK,  then R - 1 times: (baseline, c1 .. cK) rotated left by one more each round
//
// (c1 .. cK baseline, then c2 .. cK baseline c1, ...), so every configuration meets the machine's slow and fast
// minutes alike, and none always comes first or last in a round. Each trial is the job itself (the spec as
// given, or `dtrain run`'s), run by the launcher to its end, with DTRAIN_TUNE_TRIAL (trial.h) and the candidate's
// knobs in every worker's environment, no restarts, and its own run directory under <tune dir>/trials/.
//
// Budget: the first baseline trial runs under the whole budget; a budget that ends before it did says so (exit 2).
// From its duration T, the candidates that fit the rest, bottleneck first, are kept (the others "not_run", and the
// output says how much budget would run them all); a trial is stopped at max(3T, T + 30 s) ("timed_out": that
// candidate is not tried again) or when the budget ends (the tuning then ends with what was measured).
// A candidate whose trial fails (a non-zero exit, a rank without its trial line, the script ending before the last
// step) is "failed" with the reason and not tried again; the tuning goes on. A baseline that fails ends the tuning
// (exit 1; exit 2 for a script that makes too few optimizer steps). SIGINT/SIGTERM stop the running trial and end
// the tuning with what was measured (exit 130).

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/spec/spec.h"
#include "cli/tune/candidates.h"
#include "cli/tune/stats.h"
#include "cli/tune/trial.h"

namespace dtrain::tune {

struct TuneOptions {
  TrialSettings trial;      // --warmup-steps, --trial-steps; losses: the first min(5, W + N) steps are checked
  int repeats = 3;          // --repeats
  double budget_s = 600;    // --budget
  std::set<std::string> parts;   // --parts: these parts' candidates, whatever their share (candidates.h)
  std::string dir;          // the tune directory (result.h), created by the caller
};

// What the launcher made of one trial.
struct TrialRun {
  int exit_code = 0;
  bool stopped = false;              // stopped at its deadline
  bool interrupted = false;          // by SIGINT/SIGTERM
  std::string run_dir;               // its run directory ("" when none was made)
  std::vector<RankTrial> ranks;      // the trial lines found, by rank
  int world = 0;                     // the ranks the job ran (0: not known)
  double seconds = 0;                // wall time, launch to end
  std::string tail;                  // the last lines of its output, for a failure's message
};

// Runs `spec` as one trial until it ends or `deadline`.
using TrialLauncher = std::function<TrialRun(const spec::Spec& spec, std::chrono::steady_clock::time_point deadline)>;

// One trial of a candidate, as measured.
struct TrialMeasure {
  TrialSteps steps;
  std::map<int, std::vector<std::optional<double>>> losses;   // by rank
  double data_wait_ms = 0;    // per step per rank, the median over ranks
  double comm_ms = 0;
  double memory_bytes = 0;    // the largest rank's: device peak, else resident peak
  double seconds = 0;
  std::string run_dir;
};

struct CandidateResult {
  Candidate candidate;
  std::string status = "not_run";   // measured, failed, loss_changed, timed_out, not_run
  std::string note;
  std::vector<TrialMeasure> trials;
  SpeedUp speed;                    // over the baseline (the baseline's own: 1)
  double rate = 0;
  std::string loss_check = "n/a";   // same, differs, n/a
};

struct TuneResult {
  std::string unit = "steps";       // tokens, samples, steps
  JobFacts facts;
  std::vector<CandidateResult> results;   // [0] the baseline
  int recommended = -1;
  double seconds = 0;
  int trials_run = 0;
  std::string ended;                // why it ended early ("" when every trial ran)
  std::string budget_note;          // candidates the budget left out, and the budget that would try them
  int exit_code = 0;                // what `dtrain tune` exits with
  std::string message;              // a refusal's or failure's explanation (exit_code != 0)
};

// Runs the trials of `spec` (valid; its command a Python script under the bootstrap or dtrain-trainer) and
// measures them. Progress lines go to `out`; events to <dir>/events.jsonl.
TuneResult run_tuning(const spec::Spec& spec, const TuneOptions& options, const TrialLauncher& launch,
                      std::FILE* out);

// Whether `command` runs dtrain-trainer.
bool is_trainer_command(const std::vector<std::string>& command);

}  // namespace dtrain::tune

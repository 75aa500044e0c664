#pragma once

// The "Tuning" section of a tune directory's report page: what `dtrain tune` found (its tune.json, described in
// cli/tune/result.h), as a ranked table of the candidates, the verdict, the lines to put in the script, the
// suggestions not tried, and how the trials were run.
//
// A tune directory's report.html is its baseline trial's page (baseline_run, a run directory inside the tune
// directory) with this section after the header; without that run (missing, or a path that leaves the tune
// directory), a page of this section alone (report.h, write_report).
//
// tune.json is read as untrusted input: bounded in size, every field optional, a field of the wrong type or a number
// out of its range read as absent, and lists capped. JSON has no infinity or NaN: a file with one (1e999, NaN) is not
// JSON and is refused whole (a writer that uses nlohmann::json writes them as null).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace dtrain::report {

inline constexpr const char* kTuneFileName = "tune.json";
// tune.json is a few KB (256 candidates of a few hundred bytes each at most); a larger file is not one tune wrote.
inline constexpr std::size_t kMaxTuneFileBytes = 1 << 20;
// Candidates kept (later ones are counted, not shown); and entries kept of lines and suggestions.
inline constexpr std::size_t kMaxTuneCandidates = 256;
inline constexpr std::size_t kMaxTuneListEntries = 256;
// The longest text kept of one string field; longer ones are cut at a UTF-8 boundary and end in "...".
inline constexpr std::size_t kMaxTuneTextBytes = 2048;

struct TuneCandidate {
  std::string name;
  std::string status;                   // measured, failed, loss_changed, timed_out, not_run (or what was written)
  std::optional<double> trials;
  std::optional<double> rate;           // units per second (TuneSummary::unit)
  std::optional<double> speedup;
  std::optional<std::pair<double, double>> ci;   // the speed-up's 95% interval
  std::optional<double> data_wait_ms;
  std::optional<double> comm_ms;
  std::optional<double> memory_bytes;
  std::string loss_check;               // same, differs, n/a
  std::string note;
};

struct TuneSummary {
  std::string job;
  std::vector<std::string> command;     // at most kMaxTuneListEntries words
  std::optional<std::uint64_t> started_ms, ended_ms;
  std::optional<double> budget_s, warmup_steps, trial_steps, repeats, ranks, trials_run;
  std::string ended;                    // why the tuning ended early ("" when every trial ran)
  std::string unit;                     // tokens, samples or steps
  std::string bottleneck;
  std::vector<std::pair<std::string, double>> shares;   // data, communication, compute: the fraction of a step
  std::string baseline_run;             // relative to the tune directory
  std::vector<TuneCandidate> candidates;   // entry 0 is the baseline
  std::size_t candidates_left_out = 0;  // past kMaxTuneCandidates
  int recommended = -1;                 // an index into candidates, -1 for none
  std::string verdict;
  std::vector<std::string> lines;       // what to put in the script
  std::vector<std::string> suggestions;
  std::string tune_yaml;                // the overlay's file name in the tune directory, "" for none
};

// A tune directory: one with a tune.json and no job's event log of its own (no events.jsonl, or one that is not a
// launched job's: its first line is not job_start; `dtrain tune` logs its trials there).
bool is_tune_dir(const std::string& dir);

// Reads `dir`/tune.json. Status: not_found when it is missing; invalid_argument when it is not a regular file, is
// larger than kMaxTuneFileBytes, or is not a JSON object (not JSON at all included).
Result<TuneSummary> read_tune(const std::string& dir);

// The baseline run's directory: `dir`/baseline_run. invalid_argument when baseline_run is empty, absolute, or has a
// ".." component (it would leave the tune directory); nothing is read.
Result<std::string> baseline_run_dir(const std::string& dir, const std::string& baseline_run);

// The section, <section id="tuning">, every string escaped; `note` (text, "" for none) is said first: why the page
// has no baseline run, for one.
std::string tuning_section(const TuneSummary& tune, const std::string& note = "");

// The indices of tune.candidates in the table's order: the candidates measured with a speed-up, fastest first (ties
// in file order), then the others in file order.
std::vector<std::size_t> tune_ranking(const TuneSummary& tune);

}  // namespace dtrain::report

#pragma once

// What `dtrain tune` concludes from its trials, and how it says so: the ranked table on the terminal, the lines to
// put in the script, the suggestions it did not try, tune.yaml and tune.json (result.h).
//
// The recommendation is the candidate with the highest speed-up among those whose interval excludes 1.0 on the
// faster side and whose losses agree with the baseline's (measure.h); none when no candidate is faster beyond the
// noise, and the verdict then says the job is already tuned for what dtrain can change without changing its
// numerics. Suggestions are `dtrain plan --from`'s remedies for the baseline's run that tune does not try (they
// change the numerics or the code: accumulation, mixed precision, ZeRO, tensor/pipeline parallelism, the NIC), each
// with the gain plan predicts.

#include <string>
#include <vector>

#include "cli/tune/session.h"

namespace dtrain::tune {

struct Conclusion {
  std::string verdict;
  std::vector<std::string> lines;         // the recommended candidate's, in the script or the command line
  std::vector<std::string> suggestions;
  std::string tune_yaml;                  // the overlay to write ("" when there is none to write)
};

// Judges every candidate (speed-up, loss check), sets result.recommended and returns what to say.
Conclusion conclude(TuneResult& result, const spec::Spec& spec);

// The lines a recommended candidate puts in a script (DataLoader and DDP arguments, threads), or dtrain-trainer's
// command with its flags and variables.
std::vector<std::string> candidate_lines(const Candidate& c, const spec::Spec& spec);

// tune.yaml's text for a candidate of a script (overlay.h's format; parse_overlay reads it back).
std::string overlay_yaml(const CandidateResult& c);

// The terminal's table, ranked: the recommendation first, then the measured by speed-up, then the rest.
std::string render_table(const TuneResult& result);

// tune.json's text (result.h).
std::string result_json(const TuneResult& result, const Conclusion& conclusion, const spec::Spec& spec,
                        const TuneOptions& options, std::uint64_t started_ms);

// The order of the table's rows: indices into result.results.
std::vector<std::size_t> ranked(const TuneResult& result);

}  // namespace dtrain::tune

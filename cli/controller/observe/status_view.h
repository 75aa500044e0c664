#pragma once

// The text `dtrain status` prints for a snapshot (job_status.h's JSON): a header (with the job's model FLOP/s and MFU
// once known), one row per rank (its MFU in percent, "-" when not known), its recent step times as a sparkline, and
// the diagnoses. A job whose ranks report a pipeline (pp_size above 1) gets a "stage" column (1/2: stage 1 of 2) and a
// "bubble%" column (the stage's waits for its neighbours over its step); one with tensor parallelism a "tp" column. On
// a terminal the sparkline uses block characters and a straggler's is drawn in bold red; elsewhere (a pipe, a file) the
// text is plain ASCII with no escape sequences, and a straggler's row says "straggler" in words. Every sparkline shares
// one scale, the lowest to the highest step time of all the ranks' recent steps, so a rank that is slower than the
// others stands out as taller bars.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::controller {

struct StatusView {
  bool terminal = false;   // block characters and colour; else plain ASCII
};

// `values` drawn as one character each between `lo` and `hi` (8 levels); the middle level when lo == hi.
std::string sparkline(const std::vector<double>& values, double lo, double hi, bool terminal);

// The whole table, lines ending in '\n'; `note` (may be empty) says where the snapshot came from.
std::string render_status(const nlohmann::json& snapshot, const std::string& note, const StatusView& view);

// One frame of `--watch` on a terminal: the cursor goes home, each line overwrites the last frame's line in place and
// clears what is left of it, and what is left below the frame is cleared, so nothing blinks between refreshes.
std::string in_place_frame(const std::string& text, bool first);

}  // namespace dtrain::controller

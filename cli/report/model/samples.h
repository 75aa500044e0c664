#pragma once

// The "samples" event of events.jsonl: what every rank reported during one window of the job, compact enough that
// a day-long 1,024-rank job's log stays in the tens of MB, fine enough that a one-minute job still has a heat map.
//
//   {"ts": end of the window (Unix ms), "event": "samples", "round": R, "window_ms": its length,
//    "rank": [...], "step": [...], "step_ms": [...], "loss": [...], "tokens_per_s": [...], "data_wait_ms": [...],
//    "compute_ms": [...], "comm_exposed_ms": [...], "optimizer_ms": [...], "pipeline_bubble_ms": [...],
//    "rss_mib": [...], "device_mib": [...], "points": [[rank, step, loss, step_ms, tokens_per_s], ...]}
//
// Columns, not one object per rank: the keys are written once per window instead of once per rank. Entry i of every
// array is rank[i]'s; only ranks with a new step in the window appear. The times are the means over the rank's new
// steps of the window (0.01 ms), step, loss and tokens/s its latest, rss_mib and device_mib the peak (MiB; device
// memory 0 when not reported). "pipeline_bubble_ms" (a pipeline stage's waits for its neighbours, in none of the other
// times) is only in a window where some rank had one: a job that is not pipelined pays no bytes for it. The window's
// length grows with the job's age (window_length): a window is written once it is that long and some rank made a
// step in it, and when a round or the job ends.
//
// "points" are the ranks' per-step points of the window (their reports' StepPoints, common/report/step_points.h),
// rank by rank, each rank's oldest first: what lets a job of a few windows draw a curve of a point per step. They
// cost about 35 bytes a step, so they are bounded three ways: at most kMaxWindowPoints per rank per window (thinned
// by thin_points, keeping the first, the last and each group's lowest and highest loss), only of ranks below
// kMaxPointRanks, and only in a round's first kPointWindows windows (about its first 100 s). A longer round's
// windows are already many points of its curve; the largest job's points add at most 7 MB a round to its log.
// These are the only copy of the points in events.jsonl (the health events do not carry them).
//
// SampleRecorder is the writer (the launcher's JobMonitor feeds it every report), its windows RankWindows
// (rank_sample.h); read_samples the one reader.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/report/model/rank_sample.h"
#include "common/report/step_points.h"

namespace dtrain::report {

// The shortest window: finer than a second costs more bytes than anyone reads off a heat map.
inline constexpr std::uint64_t kMinWindowMs = 1000;
// Windows per age: a window is 1/kWindowsPerAge of the job's age, so a job has about kWindowsPerAge * ln(age / 100 s)
// windows after its first 100 s of one-second windows: about 780 in a day, 45 MB at 1,024 ranks.
inline constexpr std::uint64_t kWindowsPerAge = 100;
std::uint64_t window_length(std::uint64_t job_age_ms);

// The points' bounds (above): per rank per window, the ranks that carry them (0 to kMaxPointRanks - 1), and the
// windows of a round that carry them.
inline constexpr std::size_t kMaxWindowPoints = 32;
inline constexpr unsigned kMaxPointRanks = 64;
inline constexpr std::size_t kPointWindows = 100;

// One rank's point of one step.
struct RankPoint {
  unsigned rank = 0;
  StepPoint point;
};

class SampleRecorder {
 public:
  // The job started at `start_ms` (Unix ms); the first window opens then.
  explicit SampleRecorder(std::uint64_t start_ms) : start_ms_(start_ms), window_start_ms_(start_ms) {}

  // A report of `sample.rank`; a report that repeats the rank's last step (a heartbeat) is not a new step.
  void add(const RankSample& sample) { windows_[sample.rank].add(sample); }
  // The per-step points of a report of `rank`, merged into the open window's (merge_points, at most
  // kMaxWindowPoints); ranks from kMaxPointRanks on are not kept.
  void add_points(unsigned rank, std::span<const StepPoint> points);
  // The fields of the samples event when the open window is due at `now_ms` (or `force`: a round or the job ends)
  // and holds a step; opens the next window either way once due.
  std::optional<nlohmann::ordered_json> take(std::uint32_t round, std::uint64_t now_ms, bool force);

 private:
  nlohmann::ordered_json take_points(std::uint32_t round);

  std::uint64_t start_ms_;
  std::uint64_t window_start_ms_;
  std::map<unsigned, RankWindow> windows_;   // by rank: its new steps in the open window
  std::map<unsigned, std::vector<StepPoint>> points_;   // by rank: its points in the open window
  std::uint32_t points_round_ = 0;            // the round whose windows point_windows_ counts
  std::size_t point_windows_ = 0;             // windows of that round written so far
};

// One samples event as read back.
struct SampleWindow {
  std::uint64_t end_ms = 0;
  std::uint64_t length_ms = 0;
  std::uint32_t round = 0;
  std::vector<RankSample> ranks;
  std::vector<RankPoint> points;   // as written: rank by rank, each rank's oldest first (merged windows: in turn)
};

// The most ranks read from one samples line: the largest job a spec allows (spec::kMaxWorldSize, 65,536 ranks).
inline constexpr std::size_t kMaxSampleRanks = 65536;

// Halves the windows of a long log by merging each pair of neighbours of one round into one window spanning both:
// per rank, the times are the mean of its two windows, step, loss and tokens/s the later one's, memory the peak;
// the points of both are kept.
// Windows of different rounds are never merged. The report keeps what it reads within a bound this way: the heat
// map and the curves get coarser, no rank or round disappears.
void merge_pairs(std::vector<SampleWindow>& windows);

// Reads one samples line of events.jsonl. A long job's log holds millions of these numbers, so the line is scanned
// for its keys and numbers directly rather than parsed into a JSON tree (10x faster). Arrays shorter than "rank", or
// holding what is not a number (a hand-edited log), leave those fields 0; ranks past kMaxSampleRanks are not read.
// Points are read up to the first entry that is not five numbers.
SampleWindow read_samples(std::string_view line);

}  // namespace dtrain::report

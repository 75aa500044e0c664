#pragma once

// A finished (or running, or killed) job as its run directory tells it: events.jsonl, status.json and the stacks
// files of hung workers. Everything the report page shows comes from here; nothing needs a live launcher.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/report/model/samples.h"
#include "common/report/grid_place.h"
#include "common/status.h"

namespace dtrain::report {

struct RoundInfo {
  std::uint32_t number = 0;
  std::uint64_t start_ms = 0;
  std::uint64_t end_ms = 0;       // 0: no round_end (still running, or the launcher was killed)
  std::size_t nodes = 0;
  std::string outcome;            // succeeded, worker_failed, node_failed, interrupted; "" without round_end
  std::string root_cause;         // the failure as the launcher described it
};

// Something that happened at one moment: a worker failure, a node loss, a failed health check, a diagnosis.
struct Mark {
  enum class Kind { worker_failed, node_lost, hang, diagnosis };
  Kind kind = Kind::worker_failed;
  std::uint64_t ms = 0;
  std::uint32_t round = 0;
  std::string text;
};

struct DiagnosisInfo {
  std::string kind;
  std::vector<unsigned> ranks;
  std::string message;
  std::string fix;
};

// The job's model FLOP/s and MFU as the launcher's last snapshot had them (status.json; cli/mfu/model_flops.h): the
// ranks' latest rates summed. None when not known (a run before they were reported, or of a worker that does not).
struct ModelFlopsInfo {
  std::optional<double> flops_per_s;
  std::optional<double> mfu;        // a fraction of peak_basis's peak
  std::string flops_basis;          // "6N estimate", "exact" or "mixed"
  std::string peak_basis;           // "dense bf16/fp16 peak of h100-sxm"
};

struct RunModel {
  std::string dir;
  std::string job_id;
  std::string name;
  std::vector<std::string> command;
  std::uint64_t start_ms = 0;
  std::uint64_t end_ms = 0;          // job_end, else the last event
  std::string outcome = "unknown";   // succeeded, failed, or unknown (no job_end: killed, or still running)
  int exit_code = 0;
  std::vector<RoundInfo> rounds;
  std::vector<Mark> marks;
  std::vector<DiagnosisInfo> diagnoses;      // the final ones (status.json), else every one the log made
  std::map<unsigned, unsigned> node_of;      // rank -> node rank, as the latest round placed it
  std::map<unsigned, std::string> hosts;     // node rank -> host
  // rank -> its place in a --tp x --pp grid, as status.json's rows give it; only ranks of a model split that way.
  std::map<unsigned, GridPlace> grid_of;
  std::vector<SampleWindow> samples;
  std::vector<std::string> stacks_files;     // hang evidence: attempt_<n>/stacks/rank_<r>.txt, relative to dir
  ModelFlopsInfo model_flops;                // status.json's

  std::size_t ranks() const { return node_of.empty() ? 0 : node_of.rbegin()->first + 1; }
  std::size_t restarts() const { return rounds.empty() ? 0 : rounds.size() - 1; }
  std::vector<unsigned> stragglers() const;
};

// What the report reads of a run directory, bounded so that a damaged or hostile directory costs time at most, never
// unbounded memory. events.jsonl is streamed a line at a time and has no size bound of its own (a week-long job's
// log is hundreds of MB); what is kept of it is bounded below.
//
// The largest status.json read (here and by `dtrain status`): a snapshot holds a row of about 850 bytes per rank
// (with its recent step times), about 56 MB for the largest job a spec allows (65,536 ranks); 128 MiB refuses what
// no launcher wrote.
inline constexpr std::size_t kMaxStatusFileBytes = 128 << 20;
// The longest events.jsonl line read: a samples line is about 75 bytes per rank, 5 MB at 65,536 ranks. Longer lines
// (a health event of a very large job, which the page does not use, or damage) are skipped.
inline constexpr std::size_t kMaxEventLineBytes = 8 << 20;
// Rank samples kept (88 bytes each, so about 180 MB): a day of a 2,048-rank job unmerged. Past it, neighbouring
// windows are merged (merge_pairs) and the page gets coarser.
inline constexpr std::size_t kMaxKeptRankSamples = 2 << 20;
// Per-step points kept (samples.h; 40 bytes each, so 40 MB): ten rounds of the most a round writes. Past it, a
// window's points are not kept; the curves use its samples.
inline constexpr std::size_t kMaxKeptPoints = 1 << 20;
// Marks and logged diagnoses kept, each at most kMaxKeptTextBytes of text: more than a timeline can show.
inline constexpr std::size_t kMaxKeptMarks = 10000;
inline constexpr std::size_t kMaxKeptTextBytes = 2048;
// Rounds kept: a job has at most 10,001 (restart.max_restarts is at most 10,000).
inline constexpr std::size_t kMaxKeptRounds = 10001;
// Stacks files listed: one per hung rank per attempt of the page's job, far fewer in practice.
inline constexpr std::size_t kMaxStacksFiles = 4096;

// Reads `dir`; fails (naming the file and the fix) when it holds no events.jsonl (not_found) or one that is not a
// regular file (invalid_argument). Lines that are not JSON objects are skipped: a launcher killed mid-line leaves
// at most its last line broken.
Result<RunModel> read_run(const std::string& dir);

}  // namespace dtrain::report

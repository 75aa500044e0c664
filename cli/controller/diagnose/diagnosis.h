#pragma once

// What the launcher concludes from its workers' per-step reports: stragglers and the job's bottleneck.
//
//   straggler       a rank whose own work (data wait + compute + optimizer) exceeds the median of the other
//                   ranks' by more than health.straggler_ratio, and by at least kStragglerExcessShare of the median
//                   step time, in kStragglerWindows evaluations in a row. Own work, not the step: in data-parallel
//                   training every rank waits for the slowest in the gradient reduction, so all ranks have the same
//                   step time and only the slow one has more work of its own. The excess floor keeps a fast rank's
//                   jitter from naming it: ranks that wait for a straggler have ~1 ms of own work in a 100 ms step,
//                   and a 2 ms hiccup is 3x their median yet costs the job nothing. Named with its node and the
//                   likeliest cause, the part of its own work (data wait, compute or optimizer) furthest above its
//                   peers'; exposed communication is not own work and is never the cause
//   data_loading    data wait above kDataWaitShare of the step
//   communication   exposed communication above kCommShare of the step
//   memory          device memory above kMemoryShare of the device's, or the resident memory of a node's ranks
//                   together (the latest rss_bytes of each) above kMemoryShare of the node's RAM (its agent's
//                   MemTotal; a node whose RAM is not known is not judged)
//   sync            the part of the step no phase accounts for (step - data - compute - comm - optimizer -
//                   bubble) above kSyncShare: host-device synchronisation, logging, barriers between steps
//   pipeline_bubble a pipeline stage's waits for its neighbours (the bubble, its own part of a report, never
//                   exposed communication) above kBubbleShare of the step; named with the stage
//   hang            a worker failed a health check (health_watch.h)
//
// Plain C++ over per-rank sample series. Each rank's steps go into its open window (report::RankWindow, the
// accumulator the samples of events.jsonl use too: reports that repeat a step, heartbeats, are not new steps);
// evaluate(), called every second or so, closes the window of every rank that has at least kMinWindowSteps steps in
// it and compares the closed windows. So the windows slide along with time and never overlap: "3 windows in a row"
// are 3 separate stretches of at least kMinWindowSteps steps each, and one slow stretch (a checkpoint, a page-cache
// miss) is not counted three times. Stragglers and hangs stay named once found (the summary says what happened
// during the job); the other kinds reflect the latest windows. A rank of a grid that splits the model (dtrain-trainer's
// --tp, --pp) is named with its place, as its reports give it: "rank 3 (pipeline stage 1 of 2) on node 1 (host)".

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/controller/session/session_messages.h"
#include "cli/report/model/rank_sample.h"
#include "common/report/grid_place.h"

namespace dtrain::controller {

// The one conversion from a worker's report to a rank's sample, for the diagnoser and the samples of events.jsonl.
report::RankSample sample_of(const WorkerHealth& health);

// "ranks 0, 2 and 5" (or "rank 3"); a long list is cut: thousands of ranks would bury a message.
std::string rank_list(const std::vector<unsigned>& ranks);

enum class DiagnosisKind { straggler, data_loading, communication, memory, sync, pipeline_bubble, hang };
const char* to_string(DiagnosisKind kind);

struct Diagnosis {
  DiagnosisKind kind = DiagnosisKind::straggler;
  std::vector<unsigned> ranks;   // the ranks it is about, worst first
  std::string message;           // what was seen, with the numbers ("rank 2 on node 1 (host) was 41% slower ...")
  std::string fix;               // what to do about it
};

// Where a rank runs, for messages and fixes.
struct RankPlace {
  unsigned node = 0;             // node rank
  std::string host;
  unsigned cpus = 0;             // CPUs it may use (its binding, else OMP_NUM_THREADS); 0 = not known
};

// A rank's means over its window.
struct WindowMeans {
  report::RankSample mean;       // step is the latest step of the window
  double data_wait_ratio = 0;    // data wait / step (0 without step_ms)
  double comm_exposed_ratio = 0;
  double pipeline_bubble_ratio = 0;
};

class Diagnoser {
 public:
  // The shares past which a job diagnosis is made, of the step time.
  static constexpr double kDataWaitShare = 0.10;
  static constexpr double kCommShare = 0.20;
  static constexpr double kSyncShare = 0.20;
  static constexpr double kMemoryShare = 0.90;
  // A pipeline's bubble past which more micro-batches pay: the ideal bubble (P-1)/m is under it once m is above
  // 4 x (P-1), a --grad-accum that costs nothing but activation memory (and 1F1B bounds that).
  static constexpr double kBubbleShare = 0.25;
  // Steps a window needs before it is closed and compared: enough that one odd step does not decide, few enough
  // that jobs with steps of several seconds are still diagnosed within a minute or two.
  static constexpr std::size_t kMinWindowSteps = 3;
  // A window also closes with 2 steps once it has been open this many evaluations (about a second each): a rank
  // twice as slow as its peers fills a window of kMinWindowSteps in twice their time, and would be named only after
  // three of those.
  static constexpr int kMaxWindowEvaluations = 4;
  // Evaluations in a row above the ratio (and the excess floor) before a rank is named: one slow window is noise.
  static constexpr int kStragglerWindows = 3;
  // The least excess of a straggler's own work over the median own work, as a share of the median step time: below
  // it the rank is not what the job waits for, however large its ratio to a small median.
  static constexpr double kStragglerExcessShare = 0.10;

  explicit Diagnoser(double straggler_ratio) : ratio_(straggler_ratio) {}

  // A new placement (a new round) forgets the rank's resident memory: it was the previous process's.
  void place(unsigned rank, RankPlace place);
  // The RAM of node rank `node`, in bytes; 0 = not known, and the node's ranks' resident memory is not judged.
  void node_memory(unsigned node, std::uint64_t total_bytes);
  // A report of `rank`; its resident memory and its grid place are kept as the rank's latest (a level, judged per
  // node, not per window; a place, for its name).
  void add(unsigned rank, const report::RankSample& sample);
  // One window per rank with new steps since the last call: compares them and updates the diagnoses.
  void evaluate();
  // A rank failed a health check: `what` as the launcher said it ("made no step progress for 300.0 s ...").
  void hang(unsigned rank, const std::string& what);
  // Stragglers, then job diagnoses, then hangs.
  std::vector<Diagnosis> diagnoses() const;
  std::optional<WindowMeans> means(unsigned rank) const;

 private:
  struct Series {
    report::RankWindow open;                   // steps since the last closed window
    std::optional<report::RankSample> closed;  // the means of the last closed window
    int above = 0;                             // closed windows in a row above the ratio
    int evaluations = 0;                       // evaluations since `open` opened
  };

  // "rank 3 (pipeline stage 1 of 2) on node 1 (host)": its grid place when it has one, its node when it is placed.
  std::string where(unsigned rank) const;
  std::string on_node(unsigned rank) const;   // " on node 1 (host)", or "" when not placed
  // Closes the windows that are due; returns their ranks, in order.
  std::vector<unsigned> close_windows();
  // Judges each rank whose window closed now (`fresh`) against every other rank's latest closed window (`latest`,
  // which holds the fresh ones too): ranks close their windows at different evaluations (a slower rank's window of
  // kMinWindowSteps steps takes longer), so comparing only the windows that closed together could miss a straggler
  // whose windows never close with its peers'.
  // Each rank's latest closed window, by rank: pointers into series_, rebuilt by each evaluation (no copies).
  using Latest = std::vector<std::pair<unsigned, const report::RankSample*>>;
  void find_stragglers(const std::vector<unsigned>& fresh, const Latest& latest);
  void find_stragglers_among(const std::vector<unsigned>& fresh, const Latest& latest);
  Diagnosis straggler(unsigned rank, const report::RankSample& own, const report::RankSample& peers,
                      double slower) const;
  void find_bottlenecks(const Latest& means);
  void find_full_nodes();
  // The pipeline_bubble diagnosis (pipeline_bubble.cpp).
  void find_bubbles(const Latest& means);

  double ratio_;
  std::map<unsigned, RankPlace> places_;
  std::map<unsigned, std::uint64_t> node_ram_;   // by node rank, known ones only
  std::map<unsigned, std::uint64_t> rss_;        // by rank: its latest report's resident memory
  std::map<unsigned, GridPlace> grid_;           // by rank: its latest report's grid place, when it has one
  std::map<unsigned, Series> series_;
  std::map<unsigned, Diagnosis> stragglers_;   // by rank, sticky
  std::vector<Diagnosis> bottlenecks_;         // from the latest evaluation
  std::map<unsigned, Diagnosis> hangs_;        // by rank
};

}  // namespace dtrain::controller

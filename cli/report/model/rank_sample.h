#pragma once

// One rank's step as its health report told it, and the one accumulator of a rank's steps over a window. The
// launcher's diagnoser (cli/controller/diagnose/diagnosis.h) compares ranks' windows; its JobMonitor writes them as the
// samples event of events.jsonl (samples.h), which the report page reads back into the same type. Plain C++: the
// launcher depends on this folder, never the reverse (the conversion from a report is diagnosis.h's sample_of).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/report/grid_place.h"

namespace dtrain::report {

// One rank's report, or its means over a window. Times in ms (the last completed step's), memory in bytes; 0 = not
// reported.
struct RankSample {
  unsigned rank = 0;
  std::uint64_t step = 0;
  double step_ms = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double data_wait_ms = 0;                  // blocked waiting for the next batch
  double compute_ms = 0;                    // forward + backward, less exposed communication
  double comm_exposed_ms = 0;               // communication not hidden behind compute
  double optimizer_ms = 0;                  // clip, update, refresh or gather of the working copy
  std::uint64_t rss_bytes = 0;              // the process's resident memory
  std::uint64_t device_mem_used_bytes = 0;  // the accelerator's memory in use by the process
  std::uint64_t device_mem_total_bytes = 0;
  // Last, so that the samples written positionally ({rank, step, ..., device_mem_total_bytes}) keep their meaning.
  double pipeline_bubble_ms = 0;            // a pipeline stage's waits for its neighbours (in none of the times above)
  GridPlace grid;                           // its place in a --tp x --pp grid (sizes 0: not reported)

  // The work that is the rank's own: what it waits for from its peers (comm, a pipeline's bubble) is left out.
  double own_work_ms() const { return data_wait_ms + compute_ms + optimizer_ms; }
  bool has_breakdown() const { return own_work_ms() > 0; }
};

// One rank's new steps since its window opened. A report that repeats the rank's last step (a heartbeat, or a
// resent report) is not a new step.
class RankWindow {
 public:
  // Adds `sample` when it is a new step; false, and nothing changes, when it repeats the last step.
  bool add(const RankSample& sample);
  // New steps since the window opened.
  std::size_t steps() const { return steps_; }
  // The window as one sample: the times are the means over its steps; rank, step, loss, tokens/s and the grid place the
  // latest step's; memory (resident, device used and device total) the peak, since the question is whether it comes
  // close to running out. All 0 before the first step.
  RankSample mean() const;
  // mean(), then the next window opens. The last step is kept: a heartbeat repeating it is still no new step.
  RankSample take();

 private:
  std::optional<std::uint64_t> last_step_;
  std::size_t steps_ = 0;
  RankSample sum_;   // times summed, memory the peak, the rest the latest step's
};

// The median of `values` (the mean of the middle two when there are an even number); 0 for none. The diagnoser's
// peer medians and `dtrain plan --from`'s measures use it.
double median_of(std::vector<double> values);

}  // namespace dtrain::report

#pragma once

// Loss and throughput over steps, one line per round (a restarted job's rounds overlap in steps where it resumed
// from a checkpoint, or start again from 0). Where the samples events carry the ranks' per-step points (a round's
// first windows: samples.h), a point per step: the mean loss of the ranks with a point of that step, and the job's
// tokens/s as the mean of theirs times the round's ranks. After them (and in a log without points), a point per
// samples window: the mean loss of the ranks that reported one and the job's tokens/s (the sum over its ranks), at
// the window's latest step.

#include <string>

#include "cli/report/model/run_model.h"

namespace dtrain::report {

// Points per line at most: more than the chart has pixels is only bytes.
inline constexpr std::size_t kMaxLinePoints = 600;

enum class Progress { loss, tokens_per_s };

// The SVG element; "" when no window carries the value.
std::string progress_chart(const RunModel& model, Progress what);

}  // namespace dtrain::report

#pragma once

// A worker's completed steps, one point each, for the report page's loss and throughput curves (report.proto's
// StepPoint). A health report carries the last step's values; a report window (the worker's interval, the agent's
// coalescing, the launcher's samples window) would leave one point per window, so a short job drew axes and no
// line. Each report also carries the points of the steps since the previous one, and whoever keeps reports
// together (the trainer's reporter between sends, the agent's outbox between windows, the launcher's samples
// window) merges them here, within a bound, with one rule:
//
//   merge_points: the older points before the newer ones' first step (a resent or restarted step is the newer
//                 report's), then the newer; over the bound, thin_points.
//   thin_points:  keep the first and the last point; split the ones between into (most - 2) / 2 groups of
//                 consecutive steps, evenly, and keep each group's lowest-loss and highest-loss point (one when they
//                 are the same), in step order. The curve keeps its ends and every window's spikes and dips.
//
// Plain C++: no protobuf (report_fields.h converts from and to the message).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dtrain {

struct StepPoint {
  std::uint64_t step = 0;
  double loss = 0;
  double step_ms = 0;        // the whole optimizer step (0: not known)
  double tokens_per_s = 0;   // this rank's (0: not known)

  friend bool operator==(const StepPoint&, const StepPoint&) = default;
};

// The most points one report carries (and the agent accepts): a 1 s report interval holds 64 steps of 16 ms. A JSON
// datagram of 64 points is under 6 KB (agent/service/health_socket.h).
inline constexpr std::size_t kMaxStepPoints = 64;

// At most `most` of `points` (most >= 2), by the rule above; unchanged when they fit.
void thin_points(std::vector<StepPoint>& points, std::size_t most);

// `newer` after `older` (the points of `older` from newer's first step on dropped), thinned to `most`.
void merge_points(std::vector<StepPoint>& older, std::span<const StepPoint> newer, std::size_t most);

}  // namespace dtrain

#include "cli/report/rank_summaries.h"

#include <algorithm>
#include <vector>

#include "cli/report/row_bars.h"

namespace dtrain::report {

std::string step_breakdown(const RunModel& model, const ChartRows& rows) {
  // The pipeline's bubble is a part of its own where some rank had one; a job that is not pipelined keeps its five.
  bool pipelined = false;
  for (const auto& w : model.samples) {
    for (const auto& s : w.ranks) pipelined = pipelined || s.pipeline_bubble_ms > 0;
  }
  BarChart chart{"step-breakdown", "ms", {"data wait", "compute", "exposed communication", "optimizer"}, {}};
  if (pipelined) chart.parts.push_back("pipeline bubble");
  chart.parts.push_back("other");
  const std::size_t parts = chart.parts.size();
  chart.values.assign(rows.rows.size(), std::vector<double>(parts, 0));
  std::vector<int> count(rows.rows.size(), 0);
  for (const auto& w : model.samples) {
    for (const auto& s : w.ranks) {
      const auto row = rows.row_of.find(s.rank);
      if (row == rows.row_of.end() || s.step_ms <= 0) continue;
      auto& v = chart.values[row->second];
      const double known = s.data_wait_ms + s.compute_ms + s.comm_exposed_ms + s.optimizer_ms + s.pipeline_bubble_ms;
      v[0] += s.data_wait_ms;
      v[1] += s.compute_ms;
      v[2] += s.comm_exposed_ms;
      v[3] += s.optimizer_ms;
      if (pipelined) v[4] += s.pipeline_bubble_ms;
      v[parts - 1] += std::max(0.0, s.step_ms - known);
      ++count[row->second];
    }
  }
  for (std::size_t r = 0; r < rows.rows.size(); ++r) {
    for (double& part : chart.values[r]) part = count[r] ? part / count[r] : 0;
  }
  return row_bars(rows, chart);
}

std::string memory_charts(const RunModel& model, const ChartRows& rows) {
  BarChart host{"memory-host", "MiB", {"host memory (peak rss)"}, {}};
  BarChart device{"memory-device", "MiB", {"device memory (peak)"}, {}};
  host.values.assign(rows.rows.size(), {0.0});
  device.values.assign(rows.rows.size(), {0.0});
  constexpr double kMib = 1024.0 * 1024.0;
  for (const auto& w : model.samples) {
    for (const auto& s : w.ranks) {
      const auto row = rows.row_of.find(s.rank);
      if (row == rows.row_of.end()) continue;
      host.values[row->second][0] = std::max(host.values[row->second][0], s.rss_bytes / kMib);
      device.values[row->second][0] = std::max(device.values[row->second][0], s.device_mem_used_bytes / kMib);
    }
  }
  return row_bars(rows, host) + row_bars(rows, device);
}

}  // namespace dtrain::report

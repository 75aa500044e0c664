#include "cli/report/heat_map.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cli/report/svg.h"

namespace dtrain::report {
namespace {

constexpr double kMapLabelWidth = 130;
constexpr double kMapPlotWidth = 840;
constexpr double kMapTop = 10;

// The rank's own part of a step: the step less what it waited for its peers (exposed communication, a pipeline
// stage's bubble); the step alone when not broken down.
double own_ms(const RankSample& s) {
  const double waited = s.comm_exposed_ms + s.pipeline_bubble_ms;
  return waited > 0 ? s.step_ms - waited : s.step_ms;
}

struct Grid {
  std::size_t columns = 0;
  std::vector<double> sum;      // rows x columns: per rank row the sum of its windows, per node row the max
  std::vector<int> count;
  double at(std::size_t r, std::size_t c) const { return count[r * columns + c] ? sum[r * columns + c] : -1; }
};

Grid fill(const RunModel& model, const ChartRows& rows, std::uint64_t span) {
  Grid g;
  g.columns = std::min(kHeatColumns, std::max<std::size_t>(1, model.samples.size()));
  g.sum.assign(rows.rows.size() * g.columns, 0);
  g.count.assign(g.sum.size(), 0);
  for (const auto& w : model.samples) {
    const std::uint64_t middle = w.end_ms - std::min(w.end_ms, w.length_ms / 2);
    const double at = middle > model.start_ms ? static_cast<double>(middle - model.start_ms) / span : 0;
    const std::size_t c = std::min(g.columns - 1, static_cast<std::size_t>(at * g.columns));
    for (const auto& s : w.ranks) {
      if (s.step_ms <= 0) continue;
      const auto row = rows.row_of.find(s.rank);
      if (row == rows.row_of.end()) continue;
      const std::size_t i = row->second * g.columns + c;
      // Rank rows average their windows in a column; node rows keep their slowest rank's.
      g.sum[i] = rows.by_node ? std::max(g.sum[i], own_ms(s)) : g.sum[i] + own_ms(s);
      g.count[i] = rows.by_node ? 1 : g.count[i] + 1;
    }
  }
  for (std::size_t i = 0; i < g.sum.size(); ++i) {
    if (g.count[i] > 1) g.sum[i] /= g.count[i];
  }
  return g;
}

double median_of(const Grid& g) {
  std::vector<double> values;
  for (std::size_t i = 0; i < g.sum.size(); ++i) {
    if (g.count[i]) values.push_back(g.sum[i]);
  }
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Ratio to the median -> colour: the median is pale, 1.75x and slower darkest.
double shade(double value, double median) { return median > 0 ? (value / median - 0.75) : 0; }

std::string legend(double y, double median) {
  std::string out = "<g class=\"legend\">";
  for (int i = 0; i <= 10; ++i) {
    out += "<rect x=\"" + coord(kMapLabelWidth + i * 20) + "\" y=\"" + coord(y) +
           "\" width=\"20\" height=\"10\" fill=\"" + heat_colour(i / 10.0) + "\"/>";
  }
  out += "<text x=\"" + coord(kMapLabelWidth + 230) + "\" y=\"" + coord(y + 9) + "\">0.75x to 1.75x the median cell (" +
         pretty(median) + " ms)</text></g>";
  return out;
}

}  // namespace

std::string heat_map(const RunModel& model, const ChartRows& rows) {
  if (rows.rows.empty() || model.samples.empty()) return "";
  const std::uint64_t span = std::max<std::uint64_t>(1, model.end_ms - model.start_ms);
  const Grid g = fill(model, rows, span);
  const double median = median_of(g);
  if (median <= 0) return "";
  const double row_h = std::clamp(600.0 / rows.rows.size(), 3.0, 14.0);
  const double cell_w = kMapPlotWidth / g.columns;
  const double bottom = kMapTop + row_h * rows.rows.size();
  std::string out = "<svg class=\"chart heat-map\" width=\"" + coord(kMapLabelWidth + kMapPlotWidth + 20) +
                    "\" height=\"" + coord(bottom + 60) +
                    "\" role=\"img\" aria-label=\"own step time per rank over time\">";
  for (std::size_t r = 0; r < rows.rows.size(); ++r) {
    const double y = kMapTop + r * row_h;
    out += "<g class=\"hm-row\"" + rows.attributes(r) + "><title>" + escape(rows.rows[r].title) + "</title>";
    if (row_h >= 8 || rows.rows[r].straggler) {
      out += "<text x=\"" + coord(kMapLabelWidth - 6) + "\" y=\"" + coord(y + std::min(row_h, 11.0) - 1) +
             "\" text-anchor=\"end\" class=\"" + (row_h >= 8 ? "label" : "label small") + "\">" +
             escape(rows.rows[r].label) + "</text>";
    }
    for (std::size_t c = 0; c < g.columns; ++c) {
      const double v = g.at(r, c);
      if (v < 0) continue;
      out += "<rect x=\"" + coord(kMapLabelWidth + c * cell_w) + "\" y=\"" + coord(y) + "\" width=\"" +
             coord(cell_w + 0.2) + "\" height=\"" + coord(row_h) + "\" fill=\"" + heat_colour(shade(v, median)) +
             "\"/>";
    }
    if (rows.rows[r].straggler) {
      out += "<rect class=\"straggler\" x=\"" + coord(kMapLabelWidth - 1) + "\" y=\"" + coord(y) + "\" width=\"" +
             coord(kMapPlotWidth + 2) + "\" height=\"" + coord(row_h) + "\"/>";
    }
    out += "</g>";
  }
  out += x_axis(Scale{0, span / 1000.0, kMapLabelWidth, kMapLabelWidth + kMapPlotWidth}, bottom,
                "seconds since the job started", 8);
  out += legend(bottom + 38, median);
  return out + "</svg>";
}

}  // namespace dtrain::report

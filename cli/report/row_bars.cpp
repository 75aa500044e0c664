#include "cli/report/row_bars.h"

#include <algorithm>
#include <numeric>

#include "cli/report/svg.h"

namespace dtrain::report {
namespace {

constexpr double kBarsLabelWidth = 130, kBarsPlotWidth = 560, kBarsTop = 24;

std::string total_text(double total, const std::string& unit) {
  return unit == "MiB" ? mib_text(total) : pretty(total) + " " + unit;
}

std::string legend(const BarChart& chart) {
  std::string out = "<g class=\"legend\">";
  double x = kBarsLabelWidth;
  for (std::size_t p = 0; p < chart.parts.size(); ++p) {
    out += "<rect x=\"" + coord(x) + "\" y=\"4\" width=\"10\" height=\"10\" fill=\"" + series_colour(p) +
           "\"/><text x=\"" + coord(x + 14) + "\" y=\"13\">" + escape(chart.parts[p]) + "</text>";
    x += 24 + 7.0 * chart.parts[p].size();
  }
  return out + "</g>";
}

}  // namespace

std::string row_bars(const ChartRows& rows, const BarChart& chart) {
  double most = 0;
  for (const auto& v : chart.values) most = std::max(most, std::accumulate(v.begin(), v.end(), 0.0));
  if (most <= 0) return "";
  const double row_h = std::clamp(600.0 / rows.rows.size(), 3.0, 14.0);
  const Scale x{0, most, kBarsLabelWidth, kBarsLabelWidth + kBarsPlotWidth};
  std::string out = "<svg class=\"chart bars\" data-chart=\"" + chart.name + "\" width=\"" +
                    coord(kBarsLabelWidth + kBarsPlotWidth + 90) + "\" height=\"" +
                    coord(kBarsTop + row_h * rows.rows.size() + 10) + "\" role=\"img\">" + legend(chart);
  for (std::size_t r = 0; r < rows.rows.size() && r < chart.values.size(); ++r) {
    const double y = kBarsTop + r * row_h;
    const auto& v = chart.values[r];
    const double total = std::accumulate(v.begin(), v.end(), 0.0);
    out += "<g class=\"bar-row\"" + rows.attributes(r) + "><title>" + escape(rows.rows[r].title) + ": " +
           total_text(total, chart.unit) + "</title>";
    if (row_h >= 8) {
      out += "<text x=\"" + coord(kBarsLabelWidth - 6) + "\" y=\"" + coord(y + row_h - 3) + "\" text-anchor=\"end\">" +
             escape(rows.rows[r].label) + "</text><text x=\"" + coord(x(total) + 4) + "\" y=\"" +
             coord(y + row_h - 3) + "\">" + total_text(total, chart.unit) + "</text>";
    }
    double at = 0;
    for (std::size_t p = 0; p < v.size(); ++p) {
      if (v[p] <= 0) continue;
      out += "<rect x=\"" + coord(x(at)) + "\" y=\"" + coord(y + 1) + "\" width=\"" + coord(x(at + v[p]) - x(at)) +
             "\" height=\"" + coord(std::max(1.0, row_h - 2)) + "\" fill=\"" + series_colour(p) + "\"/>";
      at += v[p];
    }
    out += "</g>";
  }
  return out + "</svg>";
}

}  // namespace dtrain::report

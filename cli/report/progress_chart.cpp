#include "cli/report/progress_chart.h"

#include <algorithm>
#include <map>
#include <vector>

#include "cli/report/svg.h"

namespace dtrain::report {
namespace {

constexpr double kChartLeft = 70, kChartWidth = 420, kChartTop = 10, kChartHeight = 200;

struct Point {
  double step = 0, value = 0;
};

std::map<std::uint32_t, std::vector<Point>> lines_of(const RunModel& model, Progress what) {
  std::map<std::uint32_t, std::vector<Point>> lines;
  for (const auto& w : model.samples) {
    double sum = 0, step = 0;
    int n = 0;
    for (const auto& s : w.ranks) {
      const double v = what == Progress::loss ? s.loss : s.tokens_per_s;
      if (v == 0) continue;
      sum += v;
      ++n;
      step = std::max(step, static_cast<double>(s.step));
    }
    if (n > 0) lines[w.round].push_back({step, what == Progress::loss ? sum / n : sum});
  }
  for (auto& [round, points] : lines) {
    if (points.size() <= kMaxLinePoints) continue;
    std::vector<Point> thinned;
    const double stride = static_cast<double>(points.size()) / kMaxLinePoints;
    for (std::size_t i = 0; i < kMaxLinePoints; ++i) thinned.push_back(points[static_cast<std::size_t>(i * stride)]);
    thinned.push_back(points.back());
    points = std::move(thinned);
  }
  return lines;
}

}  // namespace

std::string progress_chart(const RunModel& model, Progress what) {
  const auto lines = lines_of(model, what);
  if (lines.empty()) return "";
  double max_step = 1, lo = 1e300, hi = -1e300;
  for (const auto& [round, points] : lines) {
    for (const auto& p : points) {
      max_step = std::max(max_step, p.step);
      lo = std::min(lo, p.value);
      hi = std::max(hi, p.value);
    }
  }
  const Scale x = nice_scale(0, max_step, kChartLeft, kChartLeft + kChartWidth);
  const Scale y = nice_scale(what == Progress::tokens_per_s ? 0 : lo, hi, kChartTop + kChartHeight, kChartTop);
  const char* label = what == Progress::loss ? "loss (mean over ranks)" : "tokens/s (all ranks)";
  std::string out = "<svg class=\"chart progress\" data-chart=\"" +
                    std::string(what == Progress::loss ? "loss" : "tokens_per_s") + "\" width=\"" +
                    coord(kChartLeft + kChartWidth + 100) + "\" height=\"" + coord(kChartTop + kChartHeight + 40) +
                    "\" role=\"img\">";
  out += x_axis(x, kChartTop + kChartHeight, "step", 6) + y_axis(y, kChartLeft, label, 5);
  std::size_t i = 0;
  for (const auto& [round, points] : lines) {
    const char* colour = series_colour(i);
    out += "<polyline class=\"line\" data-round=\"" + std::to_string(round) + "\" stroke=\"" + colour +
           "\" points=\"";
    for (const auto& p : points) out += coord(x(p.step)) + "," + coord(y(p.value)) + " ";
    out += "\"/><text x=\"" + coord(kChartLeft + kChartWidth + 8) + "\" y=\"" + coord(kChartTop + 12 + 14 * i) +
           "\" fill=\"" + colour + "\">round " + std::to_string(round) + "</text>";
    ++i;
  }
  return out + "</svg>";
}

}  // namespace dtrain::report

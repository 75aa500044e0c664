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

double value_of(Progress what, double loss, double tokens_per_s) {
  return what == Progress::loss ? loss : tokens_per_s;
}

// Per round, a point per window: the mean loss of the ranks that reported one, or their tokens/s summed, at the
// window's latest step.
std::map<std::uint32_t, std::vector<Point>> window_lines(const RunModel& model, Progress what) {
  std::map<std::uint32_t, std::vector<Point>> lines;
  for (const auto& w : model.samples) {
    double sum = 0, step = 0;
    int n = 0;
    for (const auto& s : w.ranks) {
      const double v = value_of(what, s.loss, s.tokens_per_s);
      if (v == 0) continue;
      sum += v;
      ++n;
      step = std::max(step, static_cast<double>(s.step));
    }
    if (n > 0) lines[w.round].push_back({step, what == Progress::loss ? sum / n : sum});
  }
  return lines;
}

// Per round, a point per step of the ranks' per-step points (samples.h): the mean loss of the ranks with a point of
// that step, or the mean of their tokens/s times the ranks of the round (the most that any of its windows has): the
// job's rate, as the windows' sum is, when only some ranks carry points (ranks from kMaxPointRanks on) or a rank's
// point of a step was thinned away.
std::map<std::uint32_t, std::vector<Point>> point_lines(const RunModel& model, Progress what) {
  struct Sum {
    double value = 0;
    int n = 0;
  };
  std::map<std::uint32_t, std::map<std::uint64_t, Sum>> steps;
  std::map<std::uint32_t, std::size_t> ranks;
  for (const auto& w : model.samples) {
    ranks[w.round] = std::max(ranks[w.round], w.ranks.size());
    for (const auto& [rank, p] : w.points) {
      const double v = value_of(what, p.loss, p.tokens_per_s);
      if (v == 0) continue;
      Sum& sum = steps[w.round][p.step];
      sum.value += v;
      ++sum.n;
    }
  }
  std::map<std::uint32_t, std::vector<Point>> lines;
  for (const auto& [round, by_step] : steps) {
    const double scale = what == Progress::loss ? 1.0 : static_cast<double>(std::max<std::size_t>(ranks[round], 1));
    for (const auto& [step, sum] : by_step) {
      lines[round].push_back({static_cast<double>(step), sum.value / sum.n * scale});
    }
  }
  return lines;
}

// Per round, its per-step points where it has them and its windows' after them (a round's windows carry points in
// its first kPointWindows windows only), thinned to kMaxLinePoints.
std::map<std::uint32_t, std::vector<Point>> lines_of(const RunModel& model, Progress what) {
  std::map<std::uint32_t, std::vector<Point>> lines = window_lines(model, what);
  for (auto& [round, points] : point_lines(model, what)) {
    std::vector<Point>& line = lines[round];
    const double last = points.back().step;
    std::erase_if(line, [last](const Point& p) { return p.step <= last; });
    line.insert(line.begin(), points.begin(), points.end());
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

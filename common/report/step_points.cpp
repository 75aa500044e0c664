#include "common/report/step_points.h"

#include <algorithm>

namespace dtrain {

void thin_points(std::vector<StepPoint>& points, std::size_t most) {
  most = std::max<std::size_t>(most, 2);
  if (points.size() <= most) return;
  const std::size_t middle = points.size() - 2;   // the points between the first and the last
  const std::size_t groups = (most - 2) / 2;
  std::vector<StepPoint> kept;
  kept.reserve(most);
  kept.push_back(points.front());
  for (std::size_t g = 0; g < groups; ++g) {
    const auto begin = points.begin() + static_cast<long>(1 + g * middle / groups);
    const auto end = points.begin() + static_cast<long>(1 + (g + 1) * middle / groups);
    if (begin == end) continue;
    const auto [low, high] =
        std::minmax_element(begin, end, [](const StepPoint& a, const StepPoint& b) { return a.loss < b.loss; });
    kept.push_back(low < high ? *low : *high);
    if (low != high) kept.push_back(low < high ? *high : *low);
  }
  kept.push_back(points.back());
  points = std::move(kept);
}

void merge_points(std::vector<StepPoint>& older, std::span<const StepPoint> newer, std::size_t most) {
  if (!newer.empty()) {
    const std::uint64_t first = newer.front().step;
    std::erase_if(older, [first](const StepPoint& p) { return p.step >= first; });
    older.insert(older.end(), newer.begin(), newer.end());
  }
  thin_points(older, most);
}

}  // namespace dtrain

#include "cli/report/model/samples.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace dtrain::report {
namespace {

constexpr double kMib = 1024.0 * 1024.0;

// Two decimals: a hundredth of a millisecond is below any step's noise, and shorter numbers keep the log small.
double hundredths(double value) { return std::round(value * 100.0) / 100.0; }
// Losses keep 4 significant digits: the curve, not the bits.
double significant4(double value) {
  if (value == 0 || !std::isfinite(value)) return 0;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(std::fabs(value))));
  return std::round(value * scale) / scale;
}
std::uint64_t mib(std::uint64_t bytes) { return static_cast<std::uint64_t>(std::llround(bytes / kMib)); }

}  // namespace

std::uint64_t window_length(std::uint64_t job_age_ms) { return std::max(kMinWindowMs, job_age_ms / kWindowsPerAge); }

void SampleRecorder::add_points(unsigned rank, std::span<const StepPoint> points) {
  if (rank >= kMaxPointRanks || points.empty()) return;
  merge_points(points_[rank], points, kMaxWindowPoints);
}

// The open window's points as the samples event's "points" (samples.h), emptying them; none past the round's first
// kPointWindows windows.
nlohmann::ordered_json SampleRecorder::take_points(std::uint32_t round) {
  if (round != points_round_) {
    points_round_ = round;
    point_windows_ = 0;
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (point_windows_++ < kPointWindows) {
    for (const auto& [rank, points] : points_) {
      for (const StepPoint& p : points) {
        out.push_back(nlohmann::ordered_json::array(
            {rank, p.step, significant4(p.loss), hundredths(p.step_ms), hundredths(p.tokens_per_s)}));
      }
    }
  }
  points_.clear();
  return out;
}

std::optional<nlohmann::ordered_json> SampleRecorder::take(std::uint32_t round, std::uint64_t now_ms, bool force) {
  const std::uint64_t length = now_ms > window_start_ms_ ? now_ms - window_start_ms_ : 0;
  if (!force && length < window_length(now_ms > start_ms_ ? now_ms - start_ms_ : 0)) return std::nullopt;
  window_start_ms_ = now_ms;
  if (std::none_of(windows_.begin(), windows_.end(), [](const auto& w) { return w.second.steps() > 0; })) {
    return std::nullopt;
  }
  nlohmann::ordered_json points = take_points(round);
  using Column = nlohmann::ordered_json;
  Column rank = Column::array(), step = Column::array(), step_ms = Column::array(), loss = Column::array(),
         tokens = Column::array(), data = Column::array(), compute = Column::array(), comm = Column::array(),
         optimizer = Column::array(), bubble = Column::array(), rss = Column::array(), device = Column::array();
  bool pipelined = false;
  for (auto& [r, window] : windows_) {
    if (window.steps() == 0) continue;
    const RankSample s = window.take();
    rank.push_back(r);
    step.push_back(s.step);
    step_ms.push_back(hundredths(s.step_ms));
    loss.push_back(significant4(s.loss));
    tokens.push_back(hundredths(s.tokens_per_s));
    data.push_back(hundredths(s.data_wait_ms));
    compute.push_back(hundredths(s.compute_ms));
    comm.push_back(hundredths(s.comm_exposed_ms));
    optimizer.push_back(hundredths(s.optimizer_ms));
    bubble.push_back(hundredths(s.pipeline_bubble_ms));
    pipelined = pipelined || s.pipeline_bubble_ms > 0;
    rss.push_back(mib(s.rss_bytes));
    device.push_back(mib(s.device_mem_used_bytes));
  }
  Column out{{"round", round}, {"window_ms", length}, {"rank", std::move(rank)}, {"step", std::move(step)},
             {"step_ms", std::move(step_ms)}, {"loss", std::move(loss)}, {"tokens_per_s", std::move(tokens)},
             {"data_wait_ms", std::move(data)}, {"compute_ms", std::move(compute)},
             {"comm_exposed_ms", std::move(comm)}, {"optimizer_ms", std::move(optimizer)}};
  if (pipelined) out["pipeline_bubble_ms"] = std::move(bubble);
  out["rss_mib"] = std::move(rss);
  out["device_mib"] = std::move(device);
  if (!points.empty()) out["points"] = std::move(points);
  return out;
}

namespace {

// The text after `"key":` in `line`, or "" when the key is missing.
std::string_view after_key(std::string_view line, std::string_view key) {
  std::string quoted;
  quoted.reserve(key.size() + 3);
  quoted.append("\"").append(key).append("\":");
  const std::size_t at = line.find(quoted);
  return at == std::string_view::npos ? std::string_view{} : line.substr(at + quoted.size());
}

template <class T>
T number_at(std::string_view text) {
  T value{};
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// Calls set(i, number) for the numbers of the array at `text` (after its key); stops at the first that is not one.
template <class Set>
void each_number(std::string_view text, std::size_t limit, Set set) {
  if (text.empty() || text.front() != '[') return;
  const char* p = text.data() + 1;
  const char* end = text.data() + text.size();
  for (std::size_t i = 0; i < limit && p < end && *p != ']'; ++i) {
    double value = 0;
    const auto [next, error] = std::from_chars(p, end, value);
    if (error != std::errc()) return;
    set(i, value);
    p = next;
    if (p < end && *p == ',') ++p;
  }
}

// The points at `text` (after "points":): [[rank, step, loss, step_ms, tokens_per_s], ...], up to the first entry
// that is not five numbers.
std::vector<RankPoint> points_at(std::string_view text) {
  std::vector<RankPoint> points;
  if (text.empty() || text.front() != '[') return points;
  const char* p = text.data() + 1;
  const char* end = text.data() + text.size();
  while (p < end && *p == '[') {
    double v[5];
    ++p;
    for (int i = 0; i < 5; ++i) {
      const auto [next, error] = std::from_chars(p, end, v[i]);
      if (error != std::errc() || next >= end || *next != (i < 4 ? ',' : ']')) return points;
      p = next + 1;
    }
    points.push_back({static_cast<unsigned>(v[0]), {static_cast<std::uint64_t>(v[1]), v[2], v[3], v[4]}});
    if (p < end && *p == ',') ++p;
  }
  return points;
}

}  // namespace

SampleWindow read_samples(std::string_view line) {
  SampleWindow window;
  window.end_ms = number_at<std::uint64_t>(after_key(line, "ts"));
  window.length_ms = number_at<std::uint64_t>(after_key(line, "window_ms"));
  window.round = number_at<std::uint32_t>(after_key(line, "round"));
  const std::string_view ranks = after_key(line, "rank");
  std::size_t count = 0;
  each_number(ranks, kMaxSampleRanks, [&](std::size_t, double) { ++count; });
  window.ranks.resize(count);
  const auto column = [&](std::string_view key, auto set) {
    each_number(after_key(line, key), count, [&](std::size_t i, double v) { set(window.ranks[i], v); });
  };
  const auto bytes = [](double mib) { return static_cast<std::uint64_t>(mib) << 20; };
  column("rank", [](RankSample& s, double v) { s.rank = static_cast<unsigned>(v); });
  column("step", [](RankSample& s, double v) { s.step = static_cast<std::uint64_t>(v); });
  column("step_ms", [](RankSample& s, double v) { s.step_ms = v; });
  column("loss", [](RankSample& s, double v) { s.loss = v; });
  column("tokens_per_s", [](RankSample& s, double v) { s.tokens_per_s = v; });
  column("data_wait_ms", [](RankSample& s, double v) { s.data_wait_ms = v; });
  column("compute_ms", [](RankSample& s, double v) { s.compute_ms = v; });
  column("comm_exposed_ms", [](RankSample& s, double v) { s.comm_exposed_ms = v; });
  column("optimizer_ms", [](RankSample& s, double v) { s.optimizer_ms = v; });
  column("pipeline_bubble_ms", [](RankSample& s, double v) { s.pipeline_bubble_ms = v; });
  column("rss_mib", [&](RankSample& s, double v) { s.rss_bytes = bytes(v); });
  column("device_mib", [&](RankSample& s, double v) { s.device_mem_used_bytes = bytes(v); });
  window.points = points_at(after_key(line, "points"));
  return window;
}

namespace {

// Rank samples `a` (the earlier window's) and `b` (the later one's) as one window's.
RankSample merged(const RankSample& a, const RankSample& b) {
  RankSample out = b;
  const auto mean = [](double x, double y) { return (x + y) / 2; };
  out.step_ms = mean(a.step_ms, b.step_ms);
  out.data_wait_ms = mean(a.data_wait_ms, b.data_wait_ms);
  out.compute_ms = mean(a.compute_ms, b.compute_ms);
  out.comm_exposed_ms = mean(a.comm_exposed_ms, b.comm_exposed_ms);
  out.optimizer_ms = mean(a.optimizer_ms, b.optimizer_ms);
  out.pipeline_bubble_ms = mean(a.pipeline_bubble_ms, b.pipeline_bubble_ms);
  out.rss_bytes = std::max(a.rss_bytes, b.rss_bytes);
  out.device_mem_used_bytes = std::max(a.device_mem_used_bytes, b.device_mem_used_bytes);
  return out;
}

SampleWindow merged(const SampleWindow& a, const SampleWindow& b) {
  std::map<unsigned, RankSample> ranks;
  for (const auto& s : a.ranks) ranks[s.rank] = s;
  for (const auto& s : b.ranks) {
    const auto [it, added] = ranks.try_emplace(s.rank, s);
    if (!added) it->second = merged(it->second, s);
  }
  SampleWindow out{b.end_ms, a.length_ms + b.length_ms, b.round, {}, a.points};
  out.points.insert(out.points.end(), b.points.begin(), b.points.end());
  out.ranks.reserve(ranks.size());
  for (auto& [rank, sample] : ranks) out.ranks.push_back(sample);
  return out;
}

}  // namespace

void merge_pairs(std::vector<SampleWindow>& windows) {
  std::vector<SampleWindow> out;
  out.reserve(windows.size() / 2 + 1);
  for (std::size_t i = 0; i < windows.size(); ++i) {
    if (i + 1 < windows.size() && windows[i].round == windows[i + 1].round) {
      out.push_back(merged(windows[i], windows[i + 1]));
      ++i;
    } else {
      out.push_back(std::move(windows[i]));
    }
  }
  windows = std::move(out);
}

}  // namespace dtrain::report

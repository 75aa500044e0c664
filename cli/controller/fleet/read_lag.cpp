#include "cli/controller/fleet/read_lag.h"

#include <algorithm>
#include <limits>

namespace dtrain::controller {

namespace {

constexpr std::int64_t kNoFloor = std::numeric_limits<std::int64_t>::max();

// The lower median: of two nodes, the one read on time says what the launcher's own lag is. Reorders `samples`.
std::chrono::milliseconds lower_median(std::vector<std::int64_t>& samples) {
  const auto middle = samples.begin() + static_cast<std::ptrdiff_t>((samples.size() - 1) / 2);
  std::nth_element(samples.begin(), middle, samples.end());
  return std::chrono::milliseconds(*middle);
}

}  // namespace

std::optional<std::chrono::milliseconds> ReadLag::sample(int node, std::uint64_t sent_unix_ms,
                                                        std::uint64_t applied_unix_ms, Clock::time_point now) {
  if (node < 0 || sent_unix_ms == 0) return std::nullopt;
  auto closed = roll(now);
  const auto index = static_cast<std::size_t>(node);
  if (index >= floors_.size()) floors_.resize(index + 1, kNoFloor);
  const auto transit = static_cast<std::int64_t>(applied_unix_ms) - static_cast<std::int64_t>(sent_unix_ms);
  floors_[index] = std::min(floors_[index], transit);
  current_.push_back(transit - floors_[index]);
  return closed;
}

std::optional<std::chrono::milliseconds> ReadLag::roll(Clock::time_point now) {
  if (now < window_end_) return std::nullopt;
  std::optional<std::chrono::milliseconds> closed;
  if (!current_.empty()) {
    closed = lower_median(current_);
    seconds_.push_back({window_end_, *closed});
    current_.clear();
  }
  window_end_ = now + kWindow;
  while (!seconds_.empty() && seconds_.front().end + horizon_ < now) seconds_.pop_front();
  return closed;
}

std::chrono::milliseconds ReadLag::lag(Clock::time_point now) {
  roll(now);
  std::chrono::milliseconds largest{0};
  for (const auto& s : seconds_) largest = std::max(largest, s.lag);
  if (!current_.empty()) {
    std::vector<std::int64_t> copy = current_;
    largest = std::max(largest, lower_median(copy));
  }
  return std::min(largest, horizon_);
}

}  // namespace dtrain::controller

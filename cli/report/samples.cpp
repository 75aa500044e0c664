#include "cli/report/samples.h"

#include <algorithm>
#include <cmath>

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

void SampleRecorder::add(const RankSample& sample) {
  auto [last, fresh] = last_step_.try_emplace(sample.rank, sample.step);
  if (!fresh && last->second == sample.step) return;
  last->second = sample.step;
  Sums& sums = open_[sample.rank];
  ++sums.steps;
  sums.latest = sample;
  sums.step_ms += sample.step_ms;
  sums.data_wait_ms += sample.data_wait_ms;
  sums.compute_ms += sample.compute_ms;
  sums.comm_exposed_ms += sample.comm_exposed_ms;
  sums.optimizer_ms += sample.optimizer_ms;
  sums.rss_peak = std::max(sums.rss_peak, sample.rss_bytes);
  sums.device_peak = std::max(sums.device_peak, sample.device_mem_bytes);
}

std::optional<nlohmann::ordered_json> SampleRecorder::take(std::uint32_t round, std::uint64_t now_ms, bool force) {
  const std::uint64_t length = now_ms > window_start_ms_ ? now_ms - window_start_ms_ : 0;
  if (!force && length < window_length(now_ms > start_ms_ ? now_ms - start_ms_ : 0)) return std::nullopt;
  window_start_ms_ = now_ms;
  if (open_.empty()) return std::nullopt;
  using Column = nlohmann::ordered_json;
  Column rank = Column::array(), step = Column::array(), step_ms = Column::array(), loss = Column::array(),
         tokens = Column::array(), data = Column::array(), compute = Column::array(), comm = Column::array(),
         optimizer = Column::array(), rss = Column::array(), device = Column::array();
  for (const auto& [r, s] : open_) {
    const double n = static_cast<double>(s.steps);
    rank.push_back(r);
    step.push_back(s.latest.step);
    step_ms.push_back(hundredths(s.step_ms / n));
    loss.push_back(significant4(s.latest.loss));
    tokens.push_back(hundredths(s.latest.tokens_per_s));
    data.push_back(hundredths(s.data_wait_ms / n));
    compute.push_back(hundredths(s.compute_ms / n));
    comm.push_back(hundredths(s.comm_exposed_ms / n));
    optimizer.push_back(hundredths(s.optimizer_ms / n));
    rss.push_back(mib(s.rss_peak));
    device.push_back(mib(s.device_peak));
  }
  open_.clear();
  return Column{{"round", round}, {"window_ms", length}, {"rank", std::move(rank)}, {"step", std::move(step)},
                {"step_ms", std::move(step_ms)}, {"loss", std::move(loss)}, {"tokens_per_s", std::move(tokens)},
                {"data_wait_ms", std::move(data)}, {"compute_ms", std::move(compute)},
                {"comm_exposed_ms", std::move(comm)}, {"optimizer_ms", std::move(optimizer)},
                {"rss_mib", std::move(rss)}, {"device_mib", std::move(device)}};
}

SampleWindow read_samples(const nlohmann::json& event) {
  SampleWindow window;
  window.end_ms = event.value("ts", std::uint64_t{0});
  window.length_ms = event.value("window_ms", std::uint64_t{0});
  window.round = event.value("round", std::uint32_t{0});
  const auto ranks = event.find("rank");
  if (ranks == event.end() || !ranks->is_array()) return window;
  window.ranks.resize(ranks->size());
  // Each column into its field: a missing or short column leaves the field 0.
  const auto column = [&](const char* key, auto setter) {
    const auto it = event.find(key);
    if (it == event.end() || !it->is_array()) return;
    for (std::size_t i = 0; i < it->size() && i < window.ranks.size(); ++i) {
      if ((*it)[i].is_number()) setter(window.ranks[i], (*it)[i]);
    }
  };
  using J = const nlohmann::json&;
  column("rank", [](RankSample& s, J v) { s.rank = v.get<unsigned>(); });
  column("step", [](RankSample& s, J v) { s.step = v.get<std::uint64_t>(); });
  column("step_ms", [](RankSample& s, J v) { s.step_ms = v.get<double>(); });
  column("loss", [](RankSample& s, J v) { s.loss = v.get<double>(); });
  column("tokens_per_s", [](RankSample& s, J v) { s.tokens_per_s = v.get<double>(); });
  column("data_wait_ms", [](RankSample& s, J v) { s.data_wait_ms = v.get<double>(); });
  column("compute_ms", [](RankSample& s, J v) { s.compute_ms = v.get<double>(); });
  column("comm_exposed_ms", [](RankSample& s, J v) { s.comm_exposed_ms = v.get<double>(); });
  column("optimizer_ms", [](RankSample& s, J v) { s.optimizer_ms = v.get<double>(); });
  column("rss_mib", [](RankSample& s, J v) { s.rss_bytes = v.get<std::uint64_t>() << 20; });
  column("device_mib", [](RankSample& s, J v) { s.device_mem_bytes = v.get<std::uint64_t>() << 20; });
  return window;
}

}  // namespace dtrain::report

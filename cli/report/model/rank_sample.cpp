#include "cli/report/model/rank_sample.h"

#include <algorithm>

namespace dtrain::report {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<long>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (upper + *std::max_element(values.begin(), values.begin() + static_cast<long>(mid))) / 2;
}

bool RankWindow::add(const RankSample& s) {
  if (last_step_ == s.step) return false;
  last_step_ = s.step;
  ++steps_;
  sum_.rank = s.rank;
  sum_.step = s.step;
  sum_.loss = s.loss;
  sum_.tokens_per_s = s.tokens_per_s;
  sum_.grid = s.grid;
  sum_.step_ms += s.step_ms;
  sum_.data_wait_ms += s.data_wait_ms;
  sum_.compute_ms += s.compute_ms;
  sum_.comm_exposed_ms += s.comm_exposed_ms;
  sum_.optimizer_ms += s.optimizer_ms;
  sum_.pipeline_bubble_ms += s.pipeline_bubble_ms;
  sum_.rss_bytes = std::max(sum_.rss_bytes, s.rss_bytes);
  sum_.device_mem_used_bytes = std::max(sum_.device_mem_used_bytes, s.device_mem_used_bytes);
  sum_.device_mem_total_bytes = std::max(sum_.device_mem_total_bytes, s.device_mem_total_bytes);
  return true;
}

RankSample RankWindow::mean() const {
  RankSample m = sum_;
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  for (double RankSample::*field : {&RankSample::step_ms, &RankSample::data_wait_ms, &RankSample::compute_ms,
                                    &RankSample::comm_exposed_ms, &RankSample::optimizer_ms,
                                    &RankSample::pipeline_bubble_ms}) {
    m.*field /= n;
  }
  return m;
}

RankSample RankWindow::take() {
  const RankSample m = mean();
  steps_ = 0;
  sum_ = RankSample{};
  return m;
}

}  // namespace dtrain::report

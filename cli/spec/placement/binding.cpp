#include "cli/spec/placement/binding.h"

#include <algorithm>
#include <utility>

namespace dtrain::spec::detail {

std::vector<CpuShare> share_host_cpus(const std::vector<unsigned>& cpus, const std::vector<int>& cpu_numa,
                                      unsigned workers, Binding binding) {
  std::vector<CpuShare> shares(workers);
  const auto ncpus = static_cast<unsigned>(cpus.size());
  if (workers == 0 || ncpus == 0) return shares;
  if (binding == Binding::none) {
    for (auto& share : shares) share.omp_threads = std::max(1u, ncpus / workers);
    return shares;
  }
  std::vector<std::pair<int, unsigned>> ordered;  // (numa node, cpu id)
  ordered.reserve(ncpus);
  for (std::size_t i = 0; i < cpus.size(); ++i) ordered.emplace_back(i < cpu_numa.size() ? cpu_numa[i] : 0, cpus[i]);
  std::sort(ordered.begin(), ordered.end());
  if (workers > ncpus) {
    for (unsigned w = 0; w < workers; ++w) {
      shares[w].cpus = {ordered[w % ncpus].second};
      shares[w].omp_threads = 1;
    }
    return shares;
  }
  const unsigned base = ncpus / workers, extra = ncpus % workers;
  unsigned next = 0;
  for (unsigned w = 0; w < workers; ++w) {
    const unsigned size = base + (w < extra ? 1 : 0);
    for (unsigned k = 0; k < size; ++k) shares[w].cpus.push_back(ordered[next++].second);
    shares[w].omp_threads = size;
  }
  return shares;
}

}  // namespace dtrain::spec::detail

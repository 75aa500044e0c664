#include "trainer/parallel/tp/grad_norm.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "trainer/metrics/comm_time.h"

namespace dtrain::trainer {

double sum_over_group(Communicator& group, double value, const char* what) {
  if (group.size() == 1) return value;
  const int W = group.size(), r = group.rank();
  std::vector<float> parts(2 * static_cast<std::size_t>(W));
  kernels::split_double(parts.data() + 2 * r, value);
  on_host_floats(group, parts.data(), parts.size(),
                 [&](float* p) { wait_collective(*group.all_gather(p + 2 * r, p, 2), what); });
  return kernels::sum_in_double(parts.data(), parts.size());
}

namespace {

double sum_over(Communicator& group, double value, const char* what) { return sum_over_group(group, value, what); }

// The squares of grads[range] split into the part in split tensors and the part in replicated ones; the last
// pipeline stage's copy of wte is left out (the first stage counts it).
void add_squares(kernels::Backend& backend, const ParamLayout& layout, const float* grads, ParamRange range,
                 double& split, double& replicated) {
  for (const TensorInfo& t : layout.checkpoint_tensors()) {
    const std::size_t begin = std::max(range.offset, t.offset);
    const std::size_t end = std::min(range.offset + range.count, t.offset + t.count);
    if (begin < end && !t.tied_copy)
      (t.replicated ? replicated : split) += backend.sum_squares(grads + begin, end - begin);
  }
}

}  // namespace

double tensor_parallel_sum_squares(kernels::Backend& backend, Communicator& group, const ParamLayout& layout,
                                   const float* grads) {
  double split = 0, replicated = 0;
  add_squares(backend, layout, grads, {0, layout.buffer_size()}, split, replicated);
  return sum_over(group, split, "tp-all-gather (the gradient norms)") + replicated;
}

double sharded_tensor_parallel_sum_squares(kernels::Backend& backend, Communicator& dp, Communicator& tp,
                                           const ParamLayout& layout, const float* grads,
                                           const std::vector<ParamRange>& owned) {
  double split = 0, replicated = 0;
  for (const ParamRange& range : owned) add_squares(backend, layout, grads, range, split, replicated);
  split = sum_over(dp, split, "all-gather (the data-parallel gradient norms)");
  replicated = sum_over(dp, replicated, "all-gather (the data-parallel gradient norms)");
  return sum_over(tp, split, "tp-all-gather (the gradient norms)") + replicated;
}

}  // namespace dtrain::trainer

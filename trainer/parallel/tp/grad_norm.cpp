#include "trainer/parallel/tp/grad_norm.h"

#include <cstddef>
#include <vector>

#include "trainer/metrics/comm_time.h"

namespace dtrain::trainer {

double tensor_parallel_sum_squares(kernels::Backend& backend, Communicator& group, const ParamLayout& layout,
                                   const float* grads) {
  double split = 0, replicated = 0;
  for (const TensorInfo& t : layout.checkpoint_tensors()) {
    (t.replicated ? replicated : split) += backend.sum_squares(grads + t.offset, t.count);
  }
  if (group.size() > 1) {
    // As ZeRO's norm does (zero/engine.cpp): each rank's double travels as its float and the float of the rest,
    // all-gathered (a float sum would round), and the parts are added in double.
    const int W = group.size(), r = group.rank();
    std::vector<float> parts(2 * static_cast<std::size_t>(W));
    kernels::split_double(parts.data() + 2 * r, split);
    on_host_floats(group, parts.data(), parts.size(), [&](float* p) {
      wait_collective(*group.all_gather(p + 2 * r, p, 2), "all-gather (the tensor-parallel gradient norms)");
    });
    split = kernels::sum_in_double(parts.data(), parts.size());
  }
  return split + replicated;
}

}  // namespace dtrain::trainer

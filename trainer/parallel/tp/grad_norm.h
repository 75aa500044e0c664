#pragma once

// The global gradient norm of a model split over a tensor-parallel group (trainer/model/layout.h's TensorParallel),
// for clipping: every element of the whole model counted once. A split tensor's squares are summed over the group
// (each rank holds its own slice); a replicated tensor (LayerNorms, wpe, the row-parallel biases) has the same
// gradient on every rank of the group and is counted from this rank alone. The data-parallel and pipeline groups
// add their own sums on top (issue: TP/PP in dtrain-trainer).

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/model/layout.h"

namespace dtrain::trainer {

// The whole model's sum of squares of `grads` (this rank's buffer in `layout`), the same on every rank of `group`.
// Collective over the group: one all-gather of 2 floats a rank (the split part in double precision as two floats).
double tensor_parallel_sum_squares(kernels::Backend& backend, Communicator& group, const ParamLayout& layout,
                                   const float* grads);

}  // namespace dtrain::trainer

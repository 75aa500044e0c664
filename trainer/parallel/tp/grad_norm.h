#pragma once

// The global gradient norm of a model split over a tensor-parallel group (trainer/model/layout.h's TensorParallel),
// for clipping: every element of the whole model counted once. A split tensor's squares are summed over the group
// (each rank holds its own slice); a replicated tensor (LayerNorms, wpe, the row-parallel biases) has the same
// gradient on every rank of the group and is counted from this rank alone. With ZeRO the data-parallel group's
// shards are summed first (sharded_tensor_parallel_sum_squares).

#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/kernels/backend.h"
#include "trainer/model/layout.h"

namespace dtrain::trainer {

// The sum of `value` over the group, on every rank (the pipeline stages' sums of squares). As ZeRO's norm does
// (zero/engine.cpp): each rank's double travels as its float and the float of the rest, all-gathered (a float sum
// would round), and the parts are added in double. `what` names the wait (health/phase.h).
double sum_over_group(Communicator& group, double value, const char* what);

// With pipeline parallelism (layout.h's PipelineStage) the sums below are of this stage's tensors (the last stage's
// copy of wte left out): add the stages' with sum_over_group over the pipeline group.
// The whole model's sum of squares of `grads` (this rank's buffer in `layout`), the same on every rank of `group`.
// Collective over the group: one all-gather of 2 floats a rank (the split part in double precision as two floats).
double tensor_parallel_sum_squares(kernels::Backend& backend, Communicator& group, const ParamLayout& layout,
                                   const float* grads);

// The same with the gradients sharded over a data-parallel group `dp` (ZeRO): this rank's `owned` ranges of its
// buffer hold its reduced shards; their squares are summed over `dp`, and the split tensors' part over `tp` too.
// Collective over both groups (all-gathers of 2 floats a rank), the same on every rank.
double sharded_tensor_parallel_sum_squares(kernels::Backend& backend, Communicator& dp, Communicator& tp,
                                           const ParamLayout& layout, const float* grads,
                                           const std::vector<ParamRange>& owned);

}  // namespace dtrain::trainer

#pragma once

// The collectives' Work handles of the NCCL backend: each collective is enqueued on the communicator's stream
// between two CUDA events, and its Work polls the end event and NCCL's asynchronous error until it has finished,
// failed or run past the timeout (which aborts the communicator; see communicator.h). Internal to the nccl backend.

#include <nccl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "trainer/comm/nccl/state.h"

namespace dtrain::trainer {

// Enqueues `launch` (NCCL calls on state.comm / state.stream) between two events and returns its Work; with
// `count` 0 only the events are recorded: NCCL is not called for an empty collective. When NCCL answers
// ncclInProgress (the communicator is non-blocking), waits until it has put the collective on the stream, bounded by
// the timeout, before the end event goes behind it. Throws CommError when the communicator was aborted before, or
// when the launch fails or is not done by the deadline (aborting it: NCCL keeps any error of a non-blocking
// communicator, so none leaves it usable).
std::shared_ptr<Work> enqueue(const std::shared_ptr<NcclCommunicator::State>& state, const std::string& what,
                              std::size_t count, const std::function<ncclResult_t()>& launch);

}  // namespace dtrain::trainer

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
// `count` 0 only the events are recorded: NCCL is not called for an empty collective. Throws CommError when the
// communicator was aborted before, or when the launch fails (aborting it unless NCCL only refused the arguments).
std::shared_ptr<Work> enqueue(const std::shared_ptr<NcclCommunicator::State>& state, const std::string& what,
                              std::size_t count, const std::function<ncclResult_t()>& launch);

}  // namespace dtrain::trainer

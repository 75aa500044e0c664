#pragma once

// The bounded start of an NCCL communicator (communicator.h): non-blocking initialisation polled against a deadline,
// then abort, so that a rank that never joins is a clear error naming the missing ranks rather than a hang. Each
// rank marks itself in the job's store under "<key>/joined/<rank>" before it initialises; the one whose deadline
// passes reads those marks and names the ranks without one. And the matching end: ncclCommFinalize polled against
// a deadline, then ncclCommDestroy (or abort).

#include <chrono>
#include <string>
#include <vector>

#include <nccl.h>

#include "worker/store/client.h"

namespace dtrain::trainer {

struct NcclStart {
  int rank = 0;
  int size = 1;
  std::string key;                      // the unique id's store key; the joined marks go under it
  std::chrono::milliseconds timeout{};  // the deadline of the whole initialisation
  std::string who;                      // "nccl communicator (rank 0 of 2, GPU 0)", for messages
};

// ncclCommInitRankConfig with blocking = 0, polled with ncclCommGetAsyncError until it is done; returns the
// communicator. Throws CommError with NCCL's own message when initialisation fails, and, at the deadline, aborts and
// throws a CommError naming the ranks that never joined (read from `store`; may be null with one rank).
ncclComm_t start_nccl_comm(store::StoreClient* store, const NcclStart& start, const ncclUniqueId& id);

// "ranks 3, 5 of 8" (at most 16 numbers, then "and N more"); "" when none is missing.
std::string missing_ranks_text(const std::vector<int>& missing, int size);

// Ends a healthy non-blocking communicator: ncclCommFinalize polled until it is done or `timeout` passes, then
// ncclCommDestroy; ncclCommAbort when finalizing fails or times out. Returns false in that case.
bool finish_nccl_comm(ncclComm_t comm, std::chrono::milliseconds timeout);

}  // namespace dtrain::trainer

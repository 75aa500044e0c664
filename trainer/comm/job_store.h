#pragma once

// How every communicator reaches the job's store for its rendezvous (gloo's addresses, NCCL's unique id, shm's
// nonce, the `auto` layout agreement), so they all connect and wait the same way.

#include <algorithm>
#include <chrono>

#include "worker/store/client.h"
#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

// The job's store from DTRAIN_STORE_ADDR and DTRAIN_JOB_TOKEN: connecting takes at most the communicator's timeout,
// capped at the store client's own connect timeout (a store that does not answer that long is down, not busy); a
// get waits up to the communicator's timeout, as long as a peer may take to reach the same rendezvous. Throws
// store::StoreError.
inline store::StoreClient job_store(const CommOptions& options) {
  const std::chrono::milliseconds connect = store::StoreClientOptions{}.connect_timeout;
  return store::StoreClient::from_env({std::min(options.timeout, connect), options.timeout});
}

}  // namespace dtrain::trainer

#pragma once

// The NCCL rendezvous: rank 0's unique id (ncclGetUniqueId) reaches every rank through the job's store, hex-encoded
// under one key per communicator, before ncclCommInitRank.

#include <chrono>
#include <string>

#include "worker/store/client.h"

namespace dtrain::trainer {

// The unique-id exchange alone: rank 0 creates an id with ncclGetUniqueId and sets it under `key`; every other
// rank waits for the key (up to `timeout`). Returns the id's bytes (NCCL_UNIQUE_ID_BYTES of them) on every rank.
// `store` may be null when size == 1. Throws CommError naming the key and the store on failure.
std::string exchange_nccl_unique_id(store::StoreClient* store, const std::string& key, int rank, int size,
                                    std::chrono::milliseconds timeout);

}  // namespace dtrain::trainer

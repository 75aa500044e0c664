#include "trainer/comm/nccl/start.h"

#include <algorithm>
#include <thread>

#include "trainer/comm/communicator.h"
#include "trainer/comm/describe.h"
#include "trainer/comm/nccl/runtime.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using nccl_runtime::nccl_text;
using nccl_runtime::rt;

std::string joined_key(const std::string& key, int rank) { return key + "/joined/" + std::to_string(rank); }

// The ranks without a joined mark; empty when the store cannot tell (then the message says so).
std::vector<int> missing_ranks(store::StoreClient* store, const NcclStart& start, std::string& why_unknown) {
  std::vector<int> missing;
  if (store == nullptr) return missing;
  try {
    for (int r = 0; r < start.size; ++r) {
      if (!store->check({joined_key(start.key, r)})) missing.push_back(r);
    }
  } catch (const std::exception& e) {
    why_unknown = e.what();
    missing.clear();
  }
  return missing;
}

[[noreturn]] void give_up(ncclComm_t comm, store::StoreClient* store, const NcclStart& start) {
  rt().ncclCommAbort(comm);
  std::string why_unknown;
  const std::vector<int> missing = missing_ranks(store, start, why_unknown);
  const std::string seconds = describe_seconds(start.timeout);
  if (!missing.empty()) {
    throw CommError(start.who + ": " + missing_ranks_text(missing, start.size) +
                    " never joined the NCCL communicator within " + seconds +
                    (missing.size() == 1 ? ": check that it started and reached its communicator (its log)"
                                         : ": check that those ranks started and reached their communicator (their "
                                           "logs)") +
                    ", and that every rank uses the same job; aborted");
  }
  throw CommError(start.who + ": the NCCL communicator did not start within " + seconds +
                  (why_unknown.empty() ? " although every rank joined: a network NCCL cannot use between them "
                                         "(NCCL_SOCKET_IFNAME, NCCL_IB_HCA; set NCCL_DEBUG=INFO for its account)"
                                       : " (which ranks joined is unknown: " + why_unknown + ")") +
                  "; aborted");
}

}  // namespace

std::string missing_ranks_text(const std::vector<int>& missing, int size) {
  if (missing.empty()) return "";
  std::string text = missing.size() == 1 ? "rank " : "ranks ";
  const std::size_t shown = std::min<std::size_t>(missing.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) text += (i == 0 ? "" : ", ") + std::to_string(missing[i]);
  if (missing.size() > shown) text += " and " + std::to_string(missing.size() - shown) + " more";
  return text + " of " + std::to_string(size);
}

ncclComm_t start_nccl_comm(store::StoreClient* store, const NcclStart& start, const ncclUniqueId& id) {
  if (store != nullptr) {
    try {
      store->set(joined_key(start.key, start.rank), "1");
    } catch (const std::exception& e) {
      throw CommError(start.who + ": cannot mark this rank as joined in the job's store: " + e.what());
    }
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = rt().ncclCommInitRankConfig(&comm, start.size, id, start.rank, &config);
  const auto deadline = Clock::now() + start.timeout;
  while (result == ncclInProgress) {
    if (Clock::now() >= deadline) give_up(comm, store, start);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    // The query's own failure (a communicator NCCL does not know) is the error to report, not the state it left.
    ncclResult_t state = ncclInProgress;
    const ncclResult_t query = rt().ncclCommGetAsyncError(comm, &state);
    result = query != ncclSuccess ? query : state;
  }
  if (result != ncclSuccess) {
    const std::string text = nccl_text(result, comm);
    if (comm != nullptr) rt().ncclCommAbort(comm);
    throw CommError(start.who + ": ncclCommInitRankConfig failed: " + text + ". Every rank must join with the " +
                    "same id (store key '" + start.key + "'); set NCCL_DEBUG=INFO for NCCL's own account");
  }
  return comm;
}

bool finish_nccl_comm(ncclComm_t comm, std::chrono::milliseconds timeout) {
  ncclResult_t result = rt().ncclCommFinalize(comm);
  const auto deadline = Clock::now() + timeout;
  while (result == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclResult_t state = ncclInProgress;
    const ncclResult_t query = rt().ncclCommGetAsyncError(comm, &state);
    result = query != ncclSuccess ? query : state;
  }
  if (result != ncclSuccess) {
    rt().ncclCommAbort(comm);
    return false;
  }
  rt().ncclCommDestroy(comm);
  return true;
}

}  // namespace dtrain::trainer

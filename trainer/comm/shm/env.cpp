// ShmCommunicator::from_env and from_env_group (declared in shm/communicator.h): the segment's name from the job's
// variables and a nonce exchanged through the job's store.

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "trainer/comm/job_store.h"
#include "trainer/comm/node_layout.h"
#include "trainer/comm/shm/communicator.h"
#include "worker/shm_segment_name.h"
#include "worker/store/client.h"

namespace dtrain::trainer {
namespace {

std::atomic<int> shm_communicators_created{0};

// The job's id, which names the segments (worker/shm_segment_name.h); CommError when it cannot.
std::string job_from_env(int rank) {
  const char* value = std::getenv("DTRAIN_JOB_ID");
  if (value == nullptr) value = std::getenv("TORCHELASTIC_RUN_ID");
  const std::string job = value != nullptr ? value : "";
  if (job.empty() || job.find('/') != std::string::npos || job.find('@') != std::string::npos) {
    throw CommError("shm communicator (rank " + std::to_string(rank) + "): DTRAIN_JOB_ID='" + job +
                    "' cannot name a segment; start workers with dtrain run/launch, which sets it");
  }
  return job;
}

std::string fresh_nonce() {
  std::random_device random;
  char text[17];
  std::snprintf(text, sizeof(text), "%08x%08x", random(), random());
  return text;
}

ShmCommOptions base_options(int rank, int size, const CommOptions& options) {
  ShmCommOptions shm;
  shm.rank = rank;
  shm.size = size;
  shm.timeout = options.timeout;
  return shm;
}

std::uint32_t node_from_env() { return static_cast<std::uint32_t>(launcher_int("DTRAIN_NODE_RANK", 0)); }
std::uint32_t round_from_env() { return static_cast<std::uint32_t>(launcher_int("DTRAIN_RESTART_COUNT", 0)); }

CommError store_failure(int rank, const std::string& key, const store::StoreError& error) {
  return CommError("shm communicator (rank " + std::to_string(rank) + ") cannot exchange its segment's name through "
                   "the job's store (key '" + key + "'): " + error.what());
}

}  // namespace

std::unique_ptr<ShmCommunicator> ShmCommunicator::from_env(int rank, int size, const CommOptions& options) {
  const std::string job = job_from_env(rank);
  const int index = shm_communicators_created.fetch_add(1);
  // One key per node: every node's rank 0 publishes its own segment's nonce.
  const std::string key = "dtrain/shm/" + std::to_string(index) + "/node" + std::to_string(node_from_env()) + "/nonce";
  std::string nonce;
  try {
    store::StoreClient store = job_store(options);
    if (rank == 0) {
      nonce = fresh_nonce();
      store.set(key, nonce);
    } else {
      nonce = store.get(key, options.timeout);
    }
  } catch (const store::StoreError& error) {
    throw store_failure(rank, key, error);
  }
  ShmCommOptions shm = base_options(rank, size, options);
  shm.name = worker::shm_segment_name(job, node_from_env(), round_from_env(), static_cast<std::uint32_t>(index), nonce);
  return std::make_unique<ShmCommunicator>(std::move(shm));
}

std::unique_ptr<ShmCommunicator> ShmCommunicator::from_env_group(int rank, int size, const std::string& group,
                                                                 const CommOptions& options, std::string& shortfall) {
  for (const char c : group) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_') {
      throw CommError("shm communicator: group name '" + group + "' may hold only letters, digits, '-' and '_'");
    }
  }
  const std::string job = job_from_env(rank);
  const std::string key = "dtrain/shm/group/" + group + "/nonce";  // group names are unique in the job
  ShmCommOptions shm = base_options(rank, size, options);
  try {
    store::StoreClient store = job_store(options);
    if (rank != 0) {
      const std::string nonce = store.get(key, options.timeout);
      if (!nonce.empty() && nonce[0] == '!') {
        shortfall = nonce.substr(1);
        return nullptr;
      }
      shm.name = worker::shm_group_segment_name(job, node_from_env(), round_from_env(), group, nonce);
      return std::make_unique<ShmCommunicator>(std::move(shm));
    }
    const std::string nonce = fresh_nonce();
    shm.name = worker::shm_group_segment_name(job, node_from_env(), round_from_env(), group, nonce);
    bool published = false;
    shm.created = [&] {
      store.set(key, nonce);
      published = true;
    };
    try {
      return std::make_unique<ShmCommunicator>(std::move(shm));
    } catch (const CommError& error) {
      if (published) throw;  // the segment existed: a failure to join, not a lack of room
      shortfall = error.what();
      store.set(key, "!" + shortfall);
      return nullptr;
    }
  } catch (const store::StoreError& error) {
    throw store_failure(rank, key, error);
  }
}

}  // namespace dtrain::trainer

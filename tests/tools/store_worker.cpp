// dtrain-store-worker: a worker for integration tests that exercises the job's store the way ranks use it.
// Run under the launcher (RANK, WORLD_SIZE, DTRAIN_STORE_ADDR, DTRAIN_JOB_TOKEN). Every rank publishes its rank,
// counts itself in, waits for the others and reads their keys back; then checks compare_set, delete and a get
// timeout on keys of its own; rank 0 checks num_keys once every rank is done and publishes the count, which every
// rank verifies. Prints "store-worker rank R ok" and exits 0, or names the mismatch and exits 1.
// DTRAIN_STORE_WORKER_TIMEOUT_MS bounds each wait (default 60000). tests/tools/store_worker.py is its twin.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/store/client.h"

namespace {

using std::chrono::milliseconds;

struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void expect(const std::string& what, const std::string& expected, const std::string& got) {
  if (expected != got) throw Mismatch(what + ": expected '" + expected + "', got '" + got + "'");
}

int env_int(const char* name, int fallback, bool required) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    if (required) throw Mismatch(std::string(name) + " is not set (run this under dtrain launch or dtrain run)");
    return fallback;
  }
  return std::stoi(text);
}

// A large value (over gRPC's default 4 MiB message limit) so that a server without the store's limits fails.
std::string blob() {
  std::string value(5 << 20, '\0');
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>((i * 131 + 7) % 251);
  return value;
}

std::vector<std::string> keys(const std::string& prefix, int world) {
  std::vector<std::string> out;
  for (int i = 0; i < world; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// wait() takes at most 64 keys per call.
void wait_all(dtrain::store::StoreClient& store, const std::vector<std::string>& all, milliseconds timeout) {
  for (std::size_t i = 0; i < all.size(); i += 64) {
    store.wait(std::vector<std::string>(all.begin() + i, all.begin() + std::min(all.size(), i + 64)), timeout);
  }
}

void run(int rank, int world, milliseconds timeout) {
  auto store = dtrain::store::StoreClient::from_env();
  std::string me = std::to_string(rank);

  if (rank == 0) store.set("blob", blob());
  store.add("arrived", 1);
  store.set("rank/" + me, me);
  std::vector<std::string> rank_keys = keys("rank/", world);
  wait_all(store, rank_keys, timeout);
  for (int i = 0; i < world; ++i) expect("rank/" + std::to_string(i), std::to_string(i), store.get(rank_keys[i]));
  // Every rank added before setting its rank key, so all adds are in.
  expect("arrived", std::to_string(world), store.get("arrived", timeout));
  if (store.get("blob", timeout) != blob()) throw Mismatch("blob: the 5 MiB value came back different");

  std::string cas = "cas/" + me;
  expect("compare_set on a missing key with expected 'x'", "x", store.compare_set(cas, "x", "y"));
  if (store.check({cas})) throw Mismatch(cas + " exists after a compare_set that must not store");
  expect("compare_set on a missing key with expected ''", "v1", store.compare_set(cas, "", "v1"));
  expect("compare_set with a wrong expected", "v1", store.compare_set(cas, "wrong", "v2"));
  expect("compare_set with the right expected", "v2", store.compare_set(cas, "v1", "v2"));
  expect(cas, "v2", store.get(cas));
  if (!store.delete_key(cas)) throw Mismatch("delete_key " + cas + " returned false for a present key");
  if (store.delete_key(cas)) throw Mismatch("delete_key " + cas + " returned true for a deleted key");
  if (store.check({cas})) throw Mismatch(cas + " still exists after delete_key");

  try {
    store.get("never/" + me, milliseconds(200));
    throw Mismatch("get of a key nobody sets returned instead of timing out");
  } catch (const dtrain::store::StoreError& error) {
    if (error.kind() != dtrain::store::StoreError::Kind::timeout) throw;
  }

  store.set("done/" + me, "1");
  // rank/*, done/*, arrived, blob.
  std::string expected_keys = std::to_string(2 * world + 2);
  if (rank == 0) {
    wait_all(store, keys("done/", world), timeout);
    expect("num_keys once every rank is done", expected_keys, std::to_string(store.num_keys()));
    store.set("verified", expected_keys);
  }
  expect("verified (rank 0's num_keys)", expected_keys, store.get("verified", timeout));
}

}  // namespace

int main() {
  int rank = -1;
  try {
    rank = env_int("RANK", 0, true);
    int world = env_int("WORLD_SIZE", 0, true);
    milliseconds timeout(env_int("DTRAIN_STORE_WORKER_TIMEOUT_MS", 60000, false));
    run(rank, world, timeout);
  } catch (const std::exception& error) {
    std::printf("store-worker rank %d: %s\n", rank, error.what());
    std::fflush(stdout);
    return 1;
  }
  std::printf("store-worker rank %d ok\n", rank);
  std::fflush(stdout);
  return 0;
}

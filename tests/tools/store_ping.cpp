// dtrain-store-ping: the smallest store round trip a worker can make, for the rendezvous scale benchmark.
// Each rank sets "rank/<RANK>", then waits for rank 0's key and checks its value. Exits 0, or 1 with the reason.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/store/client.h"

int main() {
  const char* rank = std::getenv("RANK");
  if (rank == nullptr) {
    std::fprintf(stderr, "dtrain-store-ping: RANK is not set; run it under dtrain launch\n");
    return 1;
  }
  try {
    // Thousands of ranks may start at once on a few cores: give the store as long to accept as c10d's default.
    dtrain::store::StoreClientOptions options;
    options.connect_timeout = std::chrono::milliseconds(300000);
    auto store = dtrain::store::StoreClient::from_env(options);
    store.set(std::string("rank/") + rank, rank);
    std::string zero = store.get("rank/0", std::chrono::milliseconds(300000));
    if (zero != "0") {
      std::fprintf(stderr, "dtrain-store-ping: rank/0 holds '%s', expected '0'\n", zero.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-store-ping: %s\n", e.what());
    return 1;
  }
  return 0;
}

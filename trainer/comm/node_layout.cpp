#include "trainer/comm/node_layout.h"

#include <cstdlib>
#include <sstream>

#include "trainer/comm/communicator.h"
#include "trainer/comm/describe.h"
#include "trainer/common/env.h"

namespace dtrain::trainer {

int launcher_int(const char* name, int fallback) {
  Result<int> value = env_int(name, fallback, "the launcher (dtrain run/launch, torchrun) sets it for every worker");
  if (!value.ok()) throw CommError(value.status.message());
  return value.value;
}

RankPlace RankPlace::from_env(int rank, int world) {
  RankPlace place;
  place.rank = rank;
  place.world = world;
  place.local_rank = launcher_int("LOCAL_RANK", 0);
  place.local_world = launcher_int("LOCAL_WORLD_SIZE", 0);
  place.node = launcher_int(std::getenv("GROUP_RANK") != nullptr ? "GROUP_RANK" : "DTRAIN_NODE_RANK", 0);
  place.nodes = launcher_int("GROUP_WORLD_SIZE", 0);
  return place;
}

std::string RankPlace::misfit() const {
  const std::string me = "rank " + std::to_string(rank) + ": ";
  if (local_world < 1) return me + "LOCAL_WORLD_SIZE is not set";
  if (nodes < 1) return me + "GROUP_WORLD_SIZE is not set";
  if (static_cast<long long>(nodes) * local_world != world) {
    return me + "GROUP_WORLD_SIZE=" + std::to_string(nodes) + " nodes x LOCAL_WORLD_SIZE=" +
           std::to_string(local_world) + " is not WORLD_SIZE=" + std::to_string(world) +
           " (the nodes run different numbers of ranks)";
  }
  if (local_rank < 0 || local_rank >= local_world || node < 0 || node >= nodes ||
      static_cast<long long>(node) * local_world + local_rank != rank) {
    return me + "RANK is not GROUP_RANK=" + std::to_string(node) + " x LOCAL_WORLD_SIZE=" +
           std::to_string(local_world) + " + LOCAL_RANK=" + std::to_string(local_rank) +
           " (ranks are not numbered node by node)";
  }
  return "";
}

namespace {

// The store calls of the agreement; returns the verdict "<misfits> <ranks without shm room>\n<one such rank's why>".
std::string exchange_verdict(store::StoreClient& store, const std::string& prefix, const RankPlace& place,
                             bool misfit, std::chrono::milliseconds timeout) {
  const std::string verdict_key = prefix + "verdict";
  // Misfits and shortfalls first: the rank whose "arrived" reaches the world size knows every one is counted.
  store.add(prefix + "misfits", misfit ? 1 : 0);
  if (!place.shm_shortfall.empty()) {
    store.set(prefix + "no_shm_why", "rank " + std::to_string(place.rank) + ": " + place.shm_shortfall);
    store.add(prefix + "no_shm", 1);
  }
  if (store.add(prefix + "arrived", 1) == place.world) {
    const std::int64_t no_shm = store.add(prefix + "no_shm", 0);
    std::string verdict = std::to_string(store.add(prefix + "misfits", 0)) + " " + std::to_string(no_shm) + "\n";
    if (no_shm > 0) verdict += store.get(prefix + "no_shm_why", timeout);
    store.set(verdict_key, verdict);
    return verdict;
  }
  try {
    return store.get(verdict_key, timeout);
  } catch (const store::StoreError& error) {
    if (error.kind() != store::StoreError::Kind::timeout) throw;
    const std::int64_t arrived = store.add(prefix + "arrived", 0);
    throw CommError("rank " + std::to_string(place.rank) + " waited " + describe_seconds(timeout) +
                    " for the other ranks to say where they run (store key '" + verdict_key + "'), but only " +
                    std::to_string(arrived) + " of WORLD_SIZE=" + std::to_string(place.world) +
                    " arrived; check that every rank started (dtrain status, the workers' logs)");
  }
}

}  // namespace

NodeLayout agree_node_layout(store::StoreClient& store, const std::string& prefix, const RankPlace& place,
                             std::chrono::milliseconds timeout) {
  NodeLayout layout;
  layout.why = place.misfit();
  std::string verdict;
  try {
    verdict = exchange_verdict(store, prefix, place, !layout.why.empty(), timeout);
  } catch (const store::StoreError& error) {
    throw CommError("rank " + std::to_string(place.rank) + " cannot agree on the job's node layout through the " +
                    "job's store (key prefix '" + prefix + "'): " + error.what());
  }
  const std::size_t line_end = verdict.find('\n');
  std::istringstream counts(verdict.substr(0, line_end));
  long long misfits = -1, no_shm = -1;
  counts >> misfits >> no_shm;
  layout.uniform = misfits == 0;
  layout.shm_room = no_shm == 0;
  if (!layout.shm_room && line_end != std::string::npos) layout.shm_why = verdict.substr(line_end + 1);
  if (!layout.uniform) {
    if (layout.why.empty()) layout.why = std::to_string(misfits) + " rank(s) have places that do not fit a uniform job";
    return layout;
  }
  layout.nodes = place.nodes;
  layout.local_world = place.local_world;
  layout.node = place.node;
  layout.local_rank = place.local_rank;
  return layout;
}

}  // namespace dtrain::trainer

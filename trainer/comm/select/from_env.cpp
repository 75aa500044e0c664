// make_communicator_from_env (declared in trainer/comm/communicator.h): which backend a worker gets, and the `auto`
// choice by where its ranks run. It includes every backend, and every backend includes trainer/comm/: in a folder
// of its own, trainer/comm/ never includes its sub-folders (no include cycle between folders).

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trainer/comm/communicator.h"
#include "trainer/comm/gloo/communicator.h"
#include "trainer/comm/hier/communicator.h"
#include "trainer/comm/job_store.h"
#include "trainer/comm/local/communicator.h"
#include "trainer/comm/node_layout.h"
#include "trainer/comm/shm/communicator.h"
#ifdef DTRAIN_HAVE_NCCL
#include "trainer/comm/nccl/communicator.h"
#endif

namespace dtrain::trainer {
namespace {

// options.backend, else DTRAIN_COMM_BACKEND, else "auto"; one of auto, gloo, shm, hier, nccl.
std::string chosen_backend(const CommOptions& options) {
  std::string backend = options.backend;
  std::string from = "CommOptions::backend";
  if (backend.empty()) {
    const char* raw = std::getenv("DTRAIN_COMM_BACKEND");
    backend = raw != nullptr && *raw != '\0' ? raw : "auto";
    from = "DTRAIN_COMM_BACKEND";
  }
  if (backend != "auto" && backend != "gloo" && backend != "shm" && backend != "hier" && backend != "nccl") {
    throw CommError(from + "='" + backend + "' is not a communication backend; use auto (the default: shm within a "
                    "node, gloo across nodes), gloo (CPU, any nodes), shm (CPU, the ranks of one node), hier (shm "
                    "within nodes + gloo across them) or nccl (GPU)");
  }
  return backend;
}

int checked_rank(int world) {
  if (std::getenv("RANK") == nullptr) {
    throw CommError("RANK is not set but WORLD_SIZE=" + std::to_string(world) +
                    "; start workers with dtrain run/launch (or torchrun), which set both");
  }
  const int rank = launcher_int("RANK", 0);
  if (rank < 0 || rank >= world) {
    throw CommError("RANK=" + std::to_string(rank) + " is outside [0, WORLD_SIZE=" + std::to_string(world) + ")");
  }
  return rank;
}

// The layout the job's ranks agreed on when this process made its communicator over the whole job (auto, hier;
// shm asked for by name: every rank on this node), for make_group_communicator_from_env. Unset before that, and
// when gloo was asked for by name.
std::mutex agreed_mutex;
std::optional<NodeLayout> agreed_layout;

void remember_layout(const NodeLayout& layout) {
  std::lock_guard lock(agreed_mutex);
  agreed_layout = layout;
}

// How many layout agreements this process made before: every rank makes them in the same order, so the n-th one of
// every rank meets under the same store keys.
std::atomic<int> layouts_agreed{0};

// check_shm: auto's agreement, which also asks whether this rank's node can hold a segment of its ranks; hier
// asked for by name does not ask (it then fails with what is short and the fix, as shm does).
NodeLayout agree_from_env(int rank, int world, const CommOptions& options, bool check_shm) {
  RankPlace place = RankPlace::from_env(rank, world);
  if (check_shm && place.misfit().empty() && place.local_world > 1) {
    SegmentGeometry geometry;
    geometry.ranks = place.local_world;
    place.shm_shortfall = Segment::room_shortfall(geometry);
  }
  const std::string prefix = "dtrain/layout/" + std::to_string(layouts_agreed.fetch_add(1)) + "/";
  try {
    store::StoreClient store = job_store(options);
    NodeLayout layout = agree_node_layout(store, prefix, place, options.timeout);
    remember_layout(layout);
    return layout;
  } catch (const store::StoreError& error) {
    throw CommError("rank " + std::to_string(rank) + " cannot reach the job's store to agree on its node layout: " +
                    error.what());
  }
}

// Node shm + cross-node gloo among the ranks of the same local index.
std::unique_ptr<Communicator> make_hier(const NodeLayout& layout, const CommOptions& options) {
  auto node = ShmCommunicator::from_env(layout.local_rank, layout.local_world, options);
  auto cross = GlooCommunicator::from_env(layout.node, layout.nodes, options,
                                          "cross" + std::to_string(layout.local_rank) + "/");
  return std::make_unique<HierCommunicator>(std::move(node), std::move(cross));
}

// auto: shm when every rank is on this node, gloo with one rank per node, hier with several on each of several
// nodes; gloo when the nodes differ or a node's /dev/shm cannot hold its segment (said once, on rank 0).
std::unique_ptr<Communicator> make_auto(int rank, int world, const CommOptions& options) {
  const NodeLayout layout = agree_from_env(rank, world, options, true);
  if (layout.uniform && !layout.shm_room) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "dtrain: DTRAIN_COMM_BACKEND=auto uses gloo for every rank, without shared memory: %s. Give "
                   "/dev/shm more room for faster collectives within a node (df -h /dev/shm; in a container: "
                   "docker run --shm-size=1g, or on Kubernetes an emptyDir with medium Memory mounted at /dev/shm)\n",
                   layout.shm_why.c_str());
    }
    return GlooCommunicator::from_env(rank, world, options);
  }
  if (!layout.uniform) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "dtrain: DTRAIN_COMM_BACKEND=auto uses gloo for every rank, without shared memory: %s. Every "
                   "node must run the same number of ranks, numbered node by node, for shm within nodes\n",
                   layout.why.c_str());
    }
    return GlooCommunicator::from_env(rank, world, options);
  }
  if (layout.local_world == world) return ShmCommunicator::from_env(rank, world, options);
  if (layout.local_world == 1) return GlooCommunicator::from_env(rank, world, options);
  return make_hier(layout, options);
}

std::unique_ptr<Communicator> make_nccl(int world, const CommOptions& options) {
#ifdef DTRAIN_HAVE_NCCL
  const int rank = world > 1 || std::getenv("RANK") != nullptr ? checked_rank(world) : 0;
  const int local_rank = launcher_int("LOCAL_RANK", 0);
  if (local_rank < 0) throw CommError("LOCAL_RANK=" + std::to_string(local_rank) + " must be at least 0");
  return NcclCommunicator::from_env(rank, world, local_rank, options);
#else
  (void)world;
  (void)options;
  throw CommError("dtrain was built without NCCL (the CUDA toolkit or NCCL's nccl.h / libnccl were not found "
                  "when it was configured, or it was configured with -DDTRAIN_WITH_NCCL=OFF), so the nccl "
                  "backend is not available; use the gloo backend, or rebuild dtrain on a machine with CUDA and "
                  "NCCL (e.g. under /usr/local/cuda)");
#endif
}

// Whether every member is on `rank`'s node by the layout the job agreed on (with room for shm there); false when
// none was agreed (gloo asked for by name, or no communicator over the job made yet).
bool on_one_node(const std::vector<int>& members, int rank) {
  std::lock_guard lock(agreed_mutex);
  if (!agreed_layout || !agreed_layout->uniform || !agreed_layout->shm_room) return false;
  const int per_node = agreed_layout->local_world;
  return std::all_of(members.begin(), members.end(), [&](int member) { return member / per_node == rank / per_node; });
}

}  // namespace

std::unique_ptr<Communicator> make_communicator_from_env(const CommOptions& options) {
  const std::string backend = chosen_backend(options);
  const int world = launcher_int("WORLD_SIZE", 1);
  if (world < 1) throw CommError("WORLD_SIZE=" + std::to_string(world) + " must be at least 1");
  if (backend == "nccl") return make_nccl(world, options);
  if (world == 1) return std::make_unique<LocalCommunicator>();
  const int rank = checked_rank(world);
  if (backend == "auto") return make_auto(rank, world, options);
  if (backend == "gloo") return GlooCommunicator::from_env(rank, world, options);
  if (backend == "shm") {
    const int local_world = launcher_int("LOCAL_WORLD_SIZE", 0);
    if (local_world != 0 && local_world != world) {
      throw CommError("the shm backend connects the ranks of one node, but this job has WORLD_SIZE=" +
                      std::to_string(world) + " ranks over nodes of LOCAL_WORLD_SIZE=" +
                      std::to_string(local_world) + "; use DTRAIN_COMM_BACKEND=hier (shm within nodes, gloo "
                      "across) or DTRAIN_COMM_BACKEND=gloo for a job across nodes");
    }
    NodeLayout one_node;
    one_node.uniform = true;
    one_node.local_world = world;
    one_node.local_rank = rank;
    remember_layout(one_node);
    return ShmCommunicator::from_env(rank, world, options);
  }
  const NodeLayout layout = agree_from_env(rank, world, options, false);
  if (!layout.uniform) {
    throw CommError("DTRAIN_COMM_BACKEND=hier needs the same number of ranks on every node, numbered node by node: " +
                    layout.why + "; use DTRAIN_COMM_BACKEND=gloo (or auto, which falls back to it)");
  }
  return make_hier(layout, options);
}

std::unique_ptr<Communicator> make_group_communicator_from_env(const std::vector<int>& members,
                                                               const std::string& name, const CommOptions& options) {
  const int world = launcher_int("WORLD_SIZE", 1);
  const int rank = world > 1 || std::getenv("RANK") != nullptr ? checked_rank(std::max(world, 1)) : 0;
  const auto me = std::find(members.begin(), members.end(), rank);
  if (me == members.end()) {
    throw CommError("rank " + std::to_string(rank) + " is not a member of the group '" + name + "' it was asked to "
                    "join (" + std::to_string(members.size()) + " ranks)");
  }
  if (members.size() == 1) return std::make_unique<LocalCommunicator>();
  const std::string backend = chosen_backend(options);
  if (backend == "nccl") {
    throw CommError("group '" + name + "': communicators over part of the job (tensor- or data-parallel groups) "
                    "are built for the CPU backends only so far; nccl groups are not");
  }
  const int group_rank = static_cast<int>(me - members.begin());
  const auto group_size = static_cast<int>(members.size());
  if (backend != "gloo" && on_one_node(members, rank)) {
    std::string shortfall;
    if (auto shm = ShmCommunicator::from_env_group(group_rank, group_size, name, options, shortfall)) return shm;
    if (group_rank == 0) {
      std::fprintf(stderr,
                   "dtrain: group '%s' uses gloo, without shared memory, as its segment could not be made: %s\n",
                   name.c_str(), shortfall.c_str());
    }
  }
  return GlooCommunicator::from_env(group_rank, group_size, options, "group/" + name + "/");
}

}  // namespace dtrain::trainer

#pragma once

// How a job's ranks sit on its nodes, as every rank agrees: what the `auto` backend needs before it builds shared
// memory within nodes and a network across them (see make_communicator_from_env).
//
// A rank reads its own place from the launcher's variables (RankPlace::from_env) and checks it against the shape of
// a uniform job: L = LOCAL_WORLD_SIZE ranks on each of N = GROUP_WORLD_SIZE nodes, N x L = WORLD_SIZE, ranks
// numbered node-major (RANK = GROUP_RANK x L + LOCAL_RANK), as dtrain's launcher and torchrun number them. One rank
// cannot see another node's L, so the ranks agree through the job's store: each adds 1 to a "misfits" counter when
// its own place does not fit, then 1 to an "arrived" counter; the rank that arrives last has seen every misfit and
// publishes the verdict, which the others wait for. Four store calls per rank, whatever the job's size. Every rank
// gets the same answer, so none builds a segment that a peer will never join.
//
// The same agreement decides whether shared memory is usable at all: a rank whose node's /dev/shm has no room for
// its segment's staging slots (RankPlace::shm_shortfall) adds 1 to a "no_shm" counter too, after leaving its reason
// under "no_shm_why" (two more calls, on such ranks only), so that every rank of the job falls back to gloo together.
// One rank on its own would hang its node's peers, which wait for a segment it never joins.

#include <chrono>
#include <string>

#include "worker/store/client.h"

namespace dtrain::trainer {

// The integer value of a variable the launcher sets for every worker (RANK, LOCAL_WORLD_SIZE, ...), or `fallback`
// when it is unset; CommError naming the variable and its value when it is not an integer.
int launcher_int(const char* name, int fallback);

// One rank's place as the launcher told it.
struct RankPlace {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 0;  // 0: LOCAL_WORLD_SIZE unset
  int node = 0;         // GROUP_RANK (dtrain: also DTRAIN_NODE_RANK)
  int nodes = 0;        // GROUP_WORLD_SIZE; 0: unset
  // "" when this rank's node can hold its shm segment, else why not ("/dev/shm has 0.9 MiB free ..."); from_env
  // leaves it empty, the caller that would build shm fills it (Segment::room_shortfall).
  std::string shm_shortfall;
  // RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (else DTRAIN_NODE_RANK), GROUP_WORLD_SIZE; throws
  // CommError for a variable that is set but not an integer.
  static RankPlace from_env(int rank, int world);
  // "" when this place fits a uniform node-major job, else why not (for the note that names the fallback).
  std::string misfit() const;
};

struct NodeLayout {
  bool uniform = false;  // every rank's place fits; the fields below are then the job's
  int nodes = 1;
  int local_world = 1;
  int node = 0;
  int local_rank = 0;
  std::string why;  // !uniform: this rank's misfit, or "another rank's place does not fit" when this one's does
  // Every rank's node can hold its shm segment. When not, shm_why is one short rank's shm_shortfall, with its rank.
  bool shm_room = true;
  std::string shm_why;
};

// The agreement above, under the store keys `prefix` + "misfits" / "no_shm" / "no_shm_why" / "arrived" / "verdict"
// (verdict: "<misfits> <ranks without shm room>"); `prefix` must be new in
// the store's namespace (one per communicator a process creates). Waits at most `timeout` for the verdict; throws
// CommError naming the ranks' count that did not arrive, and store::StoreError passes through as CommError.
NodeLayout agree_node_layout(store::StoreClient& store, const std::string& prefix, const RankPlace& place,
                             std::chrono::milliseconds timeout);

}  // namespace dtrain::trainer

#pragma once

// One collective of the shm backend, run by every rank on its communicator's thread. Every rank's data is visible
// to every other through the segment: either in place, when the buffer the caller passed lies in the rank's arena
// (Communicator::allocate), or staged, copied chunk by chunk through the rank's two staging slots.
//
//   allreduce       rank r sums slice r of every chunk over all ranks and writes the sum back into every rank's
//                   copy of that slice (reduce-scatter and all-gather in one pass: each rank reads and writes each
//                   element once)
//   reduce_scatter  rank r sums chunk r of every rank's input into its own output
//   all_gather      rank r copies every rank's input into its own output
//   broadcast       every rank but the root copies the root's data
//
// The schedule, the same on every rank (so the sync points line up, shm/sync.h):
//
//   stage chunk 0 (staged ranks); arrive; wait for all        (everyone has published where its data is)
//   for each chunk k:
//     stage chunk k+1 into the other slot; arrive             (copy-in of k+1 overlaps the others' work on k)
//     work on chunk k; arrive; wait for all                   (nobody reads or writes chunk k any more)
//     copy chunk k out of the slot (allreduce, staged ranks)
//
// When every rank's buffer is in place there is nothing to copy, and the whole buffer is one chunk: two sync
// points per collective. Sums follow shm/sum.h's fixed rank order, so results are identical run to run.

#include <chrono>
#include <cstddef>
#include <string>

#include "trainer/comm/shm/segment.h"
#include "trainer/comm/shm/sync.h"
#include "trainer/kernels/half.h"

namespace dtrain::trainer {

enum class ShmShape { allreduce, reduce_scatter, all_gather, broadcast };

struct ShmCollective {
  ShmShape shape = ShmShape::allreduce;
  std::string what;                              // "allreduce of 262144 floats (1.0 MiB)", for errors
  kernels::Dtype type = kernels::Dtype::fp32;    // what a sum adds; all_gather and broadcast only copy
  std::size_t element_bytes = sizeof(float);
  const void* in = nullptr;   // this rank's input: allreduce and broadcast: the data itself
  void* out = nullptr;        // this rank's output: allreduce and broadcast: the data itself
  std::size_t count = 0;      // allreduce, broadcast: elements; reduce_scatter, all_gather: elements per rank
  int root = 0;               // broadcast
};

// Runs `c` on this rank; throws CommError (naming c.what) when a peer dies, leaves or misses `deadline`.
void run_shm_collective(Segment& segment, PeerSync& sync, int rank, const ShmCollective& c,
                        std::chrono::steady_clock::time_point deadline);

}  // namespace dtrain::trainer

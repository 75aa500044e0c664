#pragma once

// One benchmark driver for every collective, in the manner of nccl-tests: for each size, warm-up runs, timed runs,
// then one run on known data whose result is checked element by element (#wrong). Every rank must call it with
// the same options. Sizes are nccl-tests' "size": the bytes of the largest buffer of the collective (allreduce and
// broadcast: the buffer; all_gather: the output; reduce_scatter: the input), a multiple of 4 * size() (rounded down).
//   algbw = size / time;  busbw = algbw * factor, with factor 2(n-1)/n for allreduce, (n-1)/n for all_gather and
//   reduce_scatter, 1 for broadcast: the bandwidth each rank's link carries, comparable across rank counts.
// Buffers come from Communicator::allocate, as the trainer's do (GPU memory for nccl, the shared segment for shm,
// plain host memory for gloo), or, with user_buffers, are plain host vectors the communicator has never seen (how
// a caller that does not allocate through it fares: shm then copies through its staging slots). Filling them and
// checking the result copies outside the timed runs.

#include <cstddef>
#include <string>
#include <vector>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {

struct CollectiveBenchOptions {
  // "allreduce", "all_gather", "reduce_scatter", "broadcast" or "sendrecv": every rank send()s size bytes to the
  // next rank and recv()s as many from the one before, at once (a pipeline's exchange between stages; the time is
  // that of both; busbw = algbw; 2 ranks or more, on a backend with point-to-point).
  std::string collective = "allreduce";
  // Sizes in bytes, as described above.
  std::vector<std::size_t> sizes_bytes = {std::size_t{1} << 20, std::size_t{25} << 20};
  int warmup_iterations = 2;  // untimed runs before the timed ones, per size
  int iterations = 10;        // timed runs per size; the time reported is their mean
  // Before each run every rank computes for a random 0..busy_ms milliseconds, the same draw on every rank (a fixed
  // seed), and the time leaves it out: a training step issues its collectives between computations that keep its
  // CPUs busy. 0: the runs back to back, as nccl-tests times them. Why it matters on a CPU node whose cores all run
  // ranks: a collective hands its work between threads (the caller, the communicator's thread, Gloo's event loop),
  // and a thread woken onto a busy core waits for the scheduler's next tick. Back-to-back runs fall into step with
  // the tick and wait a whole one each; runs issued after compute, as a step's are, land anywhere in it. Measured on
  // 2 cores, 2 ranks, Gloo, 4 KiB: 4.0 ms back to back (a tick at CONFIG_HZ=250), 1.6-1.9 ms with busy_ms 10 or 20,
  // where dtrain-trainer --tp 2 pays 1.9 ms for each collective (cli/plan/costs/formulas.h).
  double busy_ms = 0;
  // Plain host vectors instead of Communicator::allocate; refused (std::invalid_argument) by a backend whose
  // buffers are device memory.
  bool user_buffers = false;
};

struct CollectiveBenchRow {
  std::size_t bytes = 0;   // size as described above
  std::size_t count = 0;   // floats per rank's buffer (allreduce, broadcast) or chunk (all_gather, reduce_scatter)
  double time_ms = 0;      // mean over the timed runs, on this rank, issue to completion
  double algbw_gbps = 0;   // GB/s (1e9 bytes)
  double busbw_gbps = 0;   // GB/s
  std::size_t wrong = 0;   // elements that differ from the expected result in the checked run
};

// Throws std::invalid_argument for an unknown collective or non-positive iteration count; CommError on failure.
std::vector<CollectiveBenchRow> run_collective_bench(Communicator& comm, const CollectiveBenchOptions& options);

// The rows as a table in nccl-tests' spirit: size, count, time, algbw, busbw, #wrong.
std::string format_collective_bench(const std::string& collective, int ranks,
                                    const std::vector<CollectiveBenchRow>& rows);

}  // namespace dtrain::trainer

#pragma once

// How one host's CPUs are divided among the workers that run on it (binding: auto | none).

#include <vector>

#include "cli/spec/spec.h"

namespace dtrain::spec::detail {

struct CpuShare {
  std::vector<unsigned> cpus;  // affinity; empty = not pinned
  unsigned omp_threads = 1;    // OMP_NUM_THREADS
};

// Shares the host's `cpus` (cpu_numa[i] is the NUMA node of cpus[i]; missing entries count as node 0) among
// `workers` workers, given in node-rank then local-rank order; returns one share per worker.
//
// binding auto: CPUs are ordered by (NUMA node, CPU id), so consecutive CPUs share a memory controller.
//   workers <= CPUs: each worker gets a contiguous block of CPUs / workers CPUs, the first CPUs % workers blocks
//     one more; OMP_NUM_THREADS is the block size. When the workers divide the NUMA nodes evenly (4 workers,
//     2 NUMA nodes of 8 CPUs), no block straddles two NUMA nodes.
//   workers > CPUs: each worker gets one CPU, round-robin over the ordered list; OMP_NUM_THREADS=1.
// binding none: nobody is pinned; OMP_NUM_THREADS = max(1, CPUs / workers), so the host is not oversubscribed.
// No CPUs known: nobody is pinned and OMP_NUM_THREADS=1.
std::vector<CpuShare> share_host_cpus(const std::vector<unsigned>& cpus, const std::vector<int>& cpu_numa,
                                      unsigned workers, Binding binding);

}  // namespace dtrain::spec::detail

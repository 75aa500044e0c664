#pragma once

// The CPU backend: OpenBLAS sgemm for every matrix product (forward, dinp and dweight, and attention's q k^T,
// att v and their gradients), OpenMP threads around them and for the elementwise and row-wise ops. fp32.

#include "trainer/kernels/backend.h"

namespace dtrain::trainer::kernels {

// The process-wide CPU backend.
Backend& cpu_backend();

// Threads of the backend's OpenMP regions. Matrix products split their output over these threads and call
// OpenBLAS single-threaded in each, so there is one thread pool (OpenBLAS's own threads would compete with
// OpenMP's for the same cores). Call once at start with OMP_NUM_THREADS' value (the agent sets it per worker);
// n <= 0 keeps the current count.
void set_cpu_threads(int n);
// The number set last (or OpenMP's default).
int cpu_threads();

}  // namespace dtrain::trainer::kernels

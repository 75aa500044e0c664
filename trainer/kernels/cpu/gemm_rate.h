#pragma once

// The fp32 GEMM rate of this process's CPUs through the trainer's own matrix product (cpu_backend's matmul_forward:
// OpenMP threads, each calling single-threaded OpenBLAS sgemm on its slice of rows), for `dtrain doctor`, which
// caches it as the peak a CPU rank's MFU divides by (agent/node/cpu_gemm.h).
//
// Square products (size x size x size, 2 size^3 FLOPs each) after one warm-up, repeated until `budget` has passed
// (at least kMinRepeats); the rate is the best repeat's, as a peak is: the fastest the kernels were seen to run.

#include <chrono>

namespace dtrain::trainer::kernels {

struct GemmRate {
  double flops_per_s = 0;   // the best repeat's FLOP/s
  int threads = 0;          // OpenMP threads it ran on
  int size = 0;             // M = N = K
  int repeats = 0;          // timed products
};

inline constexpr int kMinRepeats = 3;

// Sets the backend's threads to `threads` (set_cpu_threads; <= 0 keeps the current count). 512 x 512 x 512 is
// 0.27 GFLOP: a few ms on a core of today, large enough that OpenBLAS runs at its full rate.
GemmRate measure_gemm_rate(int threads, int size = 512,
                           std::chrono::milliseconds budget = std::chrono::milliseconds(250));

}  // namespace dtrain::trainer::kernels

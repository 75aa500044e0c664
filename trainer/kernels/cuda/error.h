#pragma once

// CUDA failures inside the backend. A failed call there is either a programming error (a bad shape, a pointer that
// is not device memory) or a device that broke under the job (Xid, out of memory); neither is something the
// caller handles, so both are exceptions (common/status.h) whose text names the call and CUDA's error.

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace dtrain::trainer::kernels::cuda {

// "cuda backend: <what>: cudaErrorMemoryAllocation: out of memory" as a std::runtime_error, when error is one.
inline void check(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return;
  throw std::runtime_error("cuda backend: " + what + ": " + cudaGetErrorName(error) + ": " +
                           cudaGetErrorString(error));
}

// After kernel launches: a launch error (bad grid, too much shared memory) shows here, not in the launch itself.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("launching ") + kernel); }

}  // namespace dtrain::trainer::kernels::cuda

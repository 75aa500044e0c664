#pragma once

// Which compute backend a process uses, by name: the one place that knows whether this build has CUDA and whether
// the node has a GPU. The same interface in every build; a build without CUDA answers "cuda" with an error.

#include <stdexcept>
#include <string>

#include "trainer/kernels/backend.h"

namespace dtrain::trainer::kernels {

// The backend asked for cannot run in this build or on this node; the text says which and what to do.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "cpu": cpu_backend() (device ignored). "cuda": the process-wide CUDA backend of GPU `device` (an index among the
// visible GPUs), created on first use; its header, cuda/backend.h, says what it expects of pointers and streams.
// Throws BackendUnavailable when this build has no CUDA ("dtrain was built without CUDA (...)"), when no GPU is
// visible or `device` is not one of them ("no CUDA GPU is visible (...)", naming what to check), and
// std::invalid_argument for any other name.
Backend& make_backend(const std::string& name, int device = 0);

// The CUDA part of make_backend, defined by cuda/device.cpp in a build with CUDA and by cuda/unavailable.cpp
// without.
Backend& cuda_backend(int device);
// Whether this build has the CUDA backend (DTRAIN_WITH_CUDA found nvcc and cuBLASLt).
bool built_with_cuda();
// The number of GPUs this process sees: 0 without CUDA in the build, without a driver or without a GPU.
int visible_cuda_devices();

}  // namespace dtrain::trainer::kernels

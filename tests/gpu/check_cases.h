#pragma once

// The table of kernel checks (nccl-tests style: each case fills inputs, runs both backends, reports; one driver in
// kernel_check.cpp). check_layers.cpp: the model's layers; check_precision.cpp: optimizer, reductions and 16-bit.

#include <string>
#include <vector>

#include "tests/gpu/check_buffers.h"
#include "trainer/kernels/backend.h"

namespace dtrain::gpu_check {

struct Context {
  trainer::kernels::Backend& cpu;
  CudaBackend& gpu;
  Report report;
};

struct Case {
  const char* name;
  void (*run)(Context&);
};

// Tolerances (kernel_check.cpp says why).
constexpr double kFp32Tol = 1e-4;
constexpr double kHalfTol = 1e-3;

std::vector<Case> layer_cases();
std::vector<Case> precision_cases();
std::vector<Case> all_cases();

// "B=4 T=1024 C=768" from names and values.
std::string dims(std::initializer_list<std::pair<const char*, long>> values);

}  // namespace dtrain::gpu_check

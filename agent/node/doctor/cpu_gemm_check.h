#pragma once

// The doctor's cpu.gemm check: this node's fp32 GEMM rate (agent/node/cpu_gemm.h), measured by running
// `dtrain-trainer gemm-rate` (the trainer's kernels in the trainer's own process, as training runs them) and cached,
// or read back from the cache. Internal to the doctor library: gather.cpp gathers, system_checks.cpp checks.

#include <chrono>
#include <string>

#include "agent/node/doctor/check_table.h"

namespace dtrain::node::doctor {

// How long a measurement may take: the trainer itself spends ~0.25 s (kernels/cpu/gemm_rate.h) after starting up.
inline constexpr std::chrono::seconds kGemmMeasureTimeout{20};

// Runs `trainer gemm-rate --threads <threads>` and reads its JSON line. Status: unavailable when it cannot run or
// fails (its path and exit), deadline_exceeded past `timeout` (it is killed), invalid_argument for output it does not
// understand.
Result<CpuGemmRate> measure_cpu_gemm(const std::string& trainer, unsigned threads, std::chrono::milliseconds timeout);

// Measures and caches with `trainer`, or ("" ) reads the cache.
CpuGemmFinding gather_cpu_gemm(const std::string& trainer);

// The cpu.gemm row's verdict.
Finding cpu_gemm_finding(const DoctorInputs& in);

}  // namespace dtrain::node::doctor

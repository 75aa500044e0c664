#pragma once

// A node's measured fp32 GEMM rate, kept between runs: the peak a CPU rank's MFU divides by (cli/mfu/model_flops.h).
// `dtrain doctor` measures it once (dtrain-trainer gemm-rate: the trainer's own matrix product, OpenMP threads over
// single-threaded OpenBLAS sgemm, on every CPU the node gives a process) and writes it here; the agent reads it when
// it starts and sends it in its hello (NodeFacts.cpu_gemm_flops).
//
// The cache is one JSON object at <state_dir()>/cpu_gemm.json (common/os/state_dir.h: $XDG_STATE_HOME/dtrain, else
// ~/.local/state/dtrain):
//   {"format": "dtrain-cpu-gemm/1", "cpu_model": "<model name of /proc/cpuinfo>", "threads": 8,
//    "flops_per_s": 1.9e11, "size": 512, "measured_unix_ms": 1718000000000}
// A rate measured on another CPU model, or on another number of threads than the node now gives a process (a
// changed affinity mask or cgroup), is stale and refused: the node then has no rate until doctor runs again.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dtrain::node {

inline constexpr std::string_view kCpuGemmFormat = "dtrain-cpu-gemm/1";

struct CpuGemmRate {
  double flops_per_s = 0;              // the best repeat's fp32 FLOP/s on `threads` threads
  unsigned threads = 0;                // OpenMP threads it ran on (the node's CPUs, as one worker per node gets)
  std::string cpu_model;               // "model name" of /proc/cpuinfo ("unknown" when it has none)
  int size = 0;                        // M = N = K of the product
  std::uint64_t measured_unix_ms = 0;  // when
};

// The first "model name" line of <procfs_root>/cpuinfo (other architectures: "Processor", "cpu model"), else
// "unknown".
std::string cpu_model_name(const std::string& procfs_root = "/proc");

// <state_dir()>/cpu_gemm.json.
std::string default_cpu_gemm_path();

// The cache's text (one line of JSON and a newline), and back. parse_cpu_gemm never throws: text that is not such an
// object (another format, a missing or non-positive rate) is invalid_argument, naming `path` and what is wrong, and
// saying to measure again.
std::string format_cpu_gemm(const CpuGemmRate& rate);
Result<CpuGemmRate> parse_cpu_gemm(std::string_view text, const std::string& path);

// The rate this node may use: the cache at `path` when it was measured on `cpu_model` with `threads` threads.
// not_found without a cache; invalid_argument for a corrupt one (parse_cpu_gemm) or one that cannot be read;
// failed_precondition for a stale one. Each message names the file and says to run `dtrain doctor`.
Result<CpuGemmRate> read_cpu_gemm(const std::string& path, const std::string& cpu_model, unsigned threads);

// The CPUs this process may run on (its affinity mask): the threads a node's one worker gets, so the threads the rate
// is measured on and checked against.
unsigned affinity_cpu_count();

// read_cpu_gemm of this node: the default path, this CPU's model, affinity_cpu_count() threads.
Result<CpuGemmRate> read_node_cpu_gemm();

// Writes the cache atomically (a temporary file renamed over it), creating its directory. internal on failure, with
// the path and errno's text.
Status write_cpu_gemm(const std::string& path, const CpuGemmRate& rate);

}  // namespace dtrain::node

#pragma once

// `dtrain doctor` on one node: checks that catch what breaks or slows a job before it starts. Every check reads
// only DoctorInputs (gathered from the live machine by gather_inputs, or written by tests), so each verdict is a
// pure function of its facts. No gRPC here: the agent runs the same function for `dtrain doctor JOB.yaml`.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/node/cpu_gemm.h"
#include "agent/node/topology/host_scan.h"
#include "agent/node/topology/nvml.h"

namespace dtrain::node::doctor {

enum class Status { pass, warn, fail, skip };
const char* status_name(Status s);  // "pass", "warn", "fail", "skip"

struct Check {
  std::string id;        // stable, dotted: "gpu.ecc", "limits.memlock", "env.NCCL_DEBUG"
  Status status = Status::skip;
  std::string message;   // one line: what was found (for skip: why the check does not apply)
  std::string fix;       // one line: what to do ("" when there is nothing to do)
};

struct NodeReport {
  std::string node;            // hostname
  std::vector<Check> checks;
  bool failed() const;         // any check failed
  int exit_code() const { return failed() ? 1 : 0; }
};

// A resource limit; an empty side is unlimited.
struct Rlimit {
  std::optional<std::uint64_t> soft, hard;
};

// Free space where a job writes. `probed` is the directory statvfs looked at: `path` itself, or its nearest
// existing parent when `path` does not exist yet.
struct DiskSpace {
  std::string purpose;                  // "logs", "checkpoints": becomes the check id disk.<purpose>
  std::string path;                     // "" = not configured (the check skips)
  std::string probed;
  std::optional<std::uint64_t> free_bytes, total_bytes;
  std::string error;                    // statvfs failure, in words
};

struct NcclLibrary {
  bool found = false;
  std::string path;        // the file that was loaded
  int version_code = 0;    // ncclGetVersion: 22803 = 2.28.3
  std::string error;       // why not found
};

// This node's fp32 GEMM rate, the peak of its CPU ranks' MFU (cpu_gemm.h): measured by this run (a local `dtrain
// doctor`) and cached, or read from the cache (the agent's answer to `dtrain doctor JOB.yaml`).
struct CpuGemmFinding {
  bool measured = false;             // this run measured it
  std::optional<CpuGemmRate> rate;   // none: not measured and no usable cache
  std::string cache_path;
  dtrain::Status outcome;            // why there is no rate, or (measured) why it could not be cached
};

struct DoctorInputs {
  std::string node;
  topo::NvmlFacts nvml;
  topo::HostScan host;                             // PCI (GPUs, NVSwitches), RDMA ports, interfaces
  std::vector<std::string> nvidia_pci_gpus;        // BDFs of NVIDIA GPUs on PCI (what NVML should see)
  std::vector<std::string> gdr_modules;            // loaded among nvidia_peermem, nv_peer_mem
  bool fabric_manager_running = false;             // a process named nv-fabricmanager exists
  NcclLibrary nccl;
  std::map<std::string, std::string> env;          // the environment jobs inherit
  std::optional<Rlimit> memlock, nofile;           // empty: could not be read
  std::optional<std::uint64_t> shm_total_bytes;    // size of /dev/shm; empty: missing
  std::string shm_error;
  std::vector<DiskSpace> disks;
  int min_cuda_driver_version = 12000;             // oldest CUDA driver API jobs are expected to need (12.0)
  CpuGemmFinding cpu_gemm;
};

NodeReport run_node_checks(const DoctorInputs& in);

// The checks of each group (run_node_checks runs them all, in this order). Each group is a table of rows run by one
// driver (check_table.h): adding a check is adding a row there.
std::vector<Check> gpu_checks(const DoctorInputs& in);
std::vector<Check> system_checks(const DoctorInputs& in);
// Environment lint: deprecated NCCL/PyTorch names, debugging switches left on, NCCL_IB_HCA without '=',
// NCCL_SOCKET_IFNAME naming no interface of this node. One check per finding; one pass when there is none.
std::vector<Check> lint_env(const std::map<std::string, std::string>& env, const std::vector<std::string>& interfaces);

struct GatherOptions {
  topo::ScanRoots roots;                            // sysfs and procfs (tests: a fake tree)
  std::string nvml_library = "libnvidia-ml.so.1";
  std::vector<std::string> nccl_libraries = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};  // tried in order
  std::string shm_path = "/dev/shm";
  std::string log_dir = "runs";                     // where job logs go (spec logs.dir)
  std::string checkpoint_dir;                       // "" = none configured
  // dtrain-trainer, to measure the GEMM rate with and cache it ("" = only read the cache: an agent's probe).
  std::string gemm_trainer;
};

// Reads the inputs from this machine and this process (environment, limits).
DoctorInputs gather_inputs(const GatherOptions& options = {});

// The table `dtrain doctor` prints, and its --json form {"node", "checks":[{"id","status","message","fix"}]}.
std::string render_table(const NodeReport& report);
std::string render_json(const NodeReport& report);

// "1.5 GiB"
std::string human_bytes(std::uint64_t bytes);

}  // namespace dtrain::node::doctor

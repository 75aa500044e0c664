#pragma once

// What a node agent tells its launcher about the machine it runs on. Gathered from the kernel (uname,
// sched_getaffinity, sysfs, getifaddrs); no gRPC here, so the dry run and the agent share it.

#include <cstdint>
#include <string>
#include <vector>

#include "agent/node/topology/node_topology.h"
#include "common/status.h"

namespace dtrain::node {

struct Facts {
  std::string hostname;
  std::string host_id;                 // /etc/machine-id, else the hostname: nodes with the same id share CPUs
  std::vector<std::string> addresses;  // IPv4 addresses of interfaces that are up, loopback last
  std::vector<std::pair<std::string, std::string>> interfaces;  // (name, IPv4 address) of each, same order
  std::vector<unsigned> cpus;          // CPUs this process may run on (its affinity mask, so cgroups are respected)
  std::vector<int> cpu_numa;           // NUMA node of each entry of `cpus` (0 where sysfs does not say)
  unsigned gpu_count = 0;              // NVIDIA GPUs the driver exposes (/proc/driver/nvidia/gpus)
  std::string kernel;                  // uname release
  std::uint64_t mem_total_bytes = 0;   // RAM (MemTotal of /proc/meminfo); 0 = not known
  double cpu_gemm_flops = 0;           // fp32 GEMM FLOP/s `dtrain doctor` cached (cpu_gemm.h); 0 = none. gather_facts
  unsigned cpu_gemm_threads = 0;       //   leaves both: the agent sets them. The threads the rate ran on.
  topo::NodeTopology topology;         // per local rank, what `dtrain topo` recommends; gather_facts leaves it
                                       //   empty (the scan lives in the topology library): the agent sets it
};

// Reads the facts of this machine. `sysfs_root` and `procfs_root` let tests point at a fake tree.
Facts gather_facts(const std::string& sysfs_root = "/sys", const std::string& procfs_root = "/proc");

// NUMA node of each CPU under <sysfs_root>/devices/system/node/node*/cpulist; CPUs not listed map to 0.
std::vector<int> numa_of_cpus(const std::vector<unsigned>& cpus, const std::string& sysfs_root);

// The local IPv4 address this machine uses to reach `host` (routing table lookup through a UDP socket's connect;
// nothing is sent). "" when there is no route.
std::string source_address_towards(const std::string& host);

// MemTotal of a /proc/meminfo text ("MemTotal:       65843212 kB"), in bytes. An error names what was wrong
// with the text when there is no such line or its value is not a number of kB.
Result<std::uint64_t> parse_mem_total(const std::string& meminfo);

}  // namespace dtrain::node

#pragma once

// The agent's answer to a Probe (`dtrain doctor JOB.yaml`): this node's doctor checks, the versions the other nodes
// must agree with, its clock, and TCP reachability of the addresses the launcher lists. One Prober per session:
// the port it opens for the probe (node 0's MASTER_PORT range) stays open until the session ends. Domain types
// only; wire.h converts them from and to Probe and ProbeResult.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/node/reach.h"

namespace dtrain::agent {

struct ProbeRequest {
  std::uint32_t id = 0;
  bool node_checks = false;        // run this node's doctor checks
  std::string log_dir;             // absolute; the disk checks look there
  std::string checkpoint_dir;
  bool open_port = false;          // listen on a free port, as node 0 does for MASTER_PORT, until the session ends
  std::vector<std::string> reach;  // host:port addresses to open a TCP connection to
  std::chrono::milliseconds reach_timeout{0};   // 0 = Prober::kDefaultReachTimeout
};

struct ProbeAnswer {
  std::uint32_t id = 0;
  std::string node_checks_json;     // {"node","checks":[{"id","status","message","fix"}]}; "" without node_checks
  std::uint64_t unix_ms = 0;        // this agent's clock when it answered (clock skew)
  unsigned open_port = 0;           // the port it listens on (open_port), 0 if none
  std::vector<node::Reach> reach;
  std::string dtrain_version;
  std::string driver_version;       // NVIDIA driver, "" without one
  int nccl_version = 0;             // ncclGetVersion code, 0 when NCCL was not found
  std::vector<std::string> interfaces;   // interfaces that are up
};

class Prober {
 public:
  // A connect that takes longer than this is as good as refused for a job's traffic; used when the probe names no
  // timeout of its own.
  static constexpr std::chrono::milliseconds kDefaultReachTimeout{2000};

  // Runs what the probe asks for (node checks, open port, reachability; the latter bounded by its timeout).
  ProbeAnswer answer(const ProbeRequest& probe);

 private:
  std::unique_ptr<node::OpenPort> open_port_;
};

}  // namespace dtrain::agent

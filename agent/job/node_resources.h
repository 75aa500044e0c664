#pragma once

// What a job takes from this node and gives back, apart from its processes: a free port for MASTER_PORT (node 0), and
// the shm communicator's segments under /dev/shm, which workers killed before their communicator was complete
// cannot remove themselves (named by worker/shm_segment_name.h).

#include <string>

#include "agent/job/worker_group.h"

namespace dtrain::agent {

// Where POSIX shared memory lives on Linux (shm_open's directory).
inline constexpr char kShmDir[] = "/dev/shm";

// The shm segment prefix of this node's workers of the job: DTRAIN_JOB_ID and DTRAIN_NODE_RANK of its first worker
// (every worker of a node has the same); "" when they are not set.
std::string shm_prefix_of(const GroupSpec& group);

// Removes every entry of `dir` (normally /dev/shm) whose name starts with `prefix`; returns how many. An empty
// prefix removes nothing.
unsigned remove_shm_segments(const std::string& dir, const std::string& prefix);

// Binds an ephemeral TCP port on all interfaces and releases it; 0 on failure.
unsigned reserve_port();

}  // namespace dtrain::agent

#pragma once

// The session's own messages as domain types (no protobuf): how an agent introduces itself (AgentHello) and how
// its launcher configures the session (SessionConfig). wire.h converts them; session.proto describes each field.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "agent/node/facts.h"

namespace dtrain::agent {

// The agent's first message on every session.
struct AgentHello {
  node::Facts facts;
  std::string dtrain_version;
  std::uint64_t unix_ms = 0;      // this agent's clock when it sent the hello
  std::string agent_address;      // host:port of this agent's store and report server
  std::uint32_t pid = 0;
  std::optional<unsigned> slot;   // position in the launcher's host list (--slot)
};

// Configure: the job this session runs and the session's timing. A zero lease or heartbeat interval leaves the
// agent's own.
struct SessionConfig {
  std::string job_id;
  std::uint32_t node_rank = 0;
  std::chrono::milliseconds lease{0};               // stop all workers when the launcher is silent this long
  std::chrono::milliseconds heartbeat_interval{0};  // how often the agent sends Heartbeat
  std::chrono::milliseconds stop_grace{0};          // grace when the agent stops workers on its own (lease lost,
                                                    // shutdown); 0 is taken as it is
};

// StopGroup.
struct StopRequest {
  std::uint32_t round = 0;
  std::chrono::milliseconds grace{0};   // SIGTERM, wait this long, then SIGKILL to every descendant
};

}  // namespace dtrain::agent

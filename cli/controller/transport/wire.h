#pragma once

// The launcher's wire layer: the only place in cli/ that converts between protocol messages and the launcher's
// domain types (session_messages.h). Session transports (agent_connection, join_server) call it at the edge, so
// nothing behind them sees a protobuf type.

#include "cli/controller/session/session_messages.h"
#include "dtrain/v1/session.pb.h"

namespace dtrain::controller::wire {

// An agent's message in domain terms (a message with no body reads as AgentAlive).
AgentReport from_wire(const v1::AgentMessage& message);
v1::LauncherMessage to_wire(const Command& command);

}  // namespace dtrain::controller::wire

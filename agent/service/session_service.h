#pragma once

#include "agent/service/agent_ports.h"
#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::agent {

// AgentService.Session: a launcher dialed this agent (`dtrain agent --listen`). Adapts the server stream to a
// SessionStream and hands it to the agent (SessionHost, agent_ports.h).
class SessionService final : public v1::AgentService::Service {
 public:
  explicit SessionService(SessionHost& agent) : agent_(agent) {}

  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::AgentMessage, v1::LauncherMessage>* stream) override;

 private:
  SessionHost& agent_;
};

}  // namespace dtrain::agent

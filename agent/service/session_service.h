#pragma once

#include "dtrain/v1/session.grpc.pb.h"

namespace dtrain::agent {

class Agent;

// AgentService.Session: a launcher dialed this agent (`dtrain agent --listen`). Adapts the server stream to a
// SessionStream and hands it to Agent::serve_session.
class SessionService final : public v1::AgentService::Service {
 public:
  explicit SessionService(Agent& agent) : agent_(agent) {}

  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::AgentMessage, v1::LauncherMessage>* stream) override;

 private:
  Agent& agent_;
};

}  // namespace dtrain::agent

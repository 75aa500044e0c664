#pragma once
// What Agent::run() holds while it serves (agent.h keeps them opaque, so that it names no gRPC type): the agent's gRPC
// servers and the credentials they serve and dial with. Built in agent_servers.cpp; for agent*.cpp only.

#include <memory>

#include <grpcpp/grpcpp.h>

#include "agent/agent.h"
#include "agent/service/health_socket.h"
#include "agent/service/report_service.h"
#include "agent/service/session_service.h"
#include "agent/service/store_service.h"
#include "agent/session/session_socket.h"

namespace dtrain::agent {

// The agent's gRPC servers, for the life of run(). Declared in the order they are built; destroyed the other way.
struct Agent::Servers {
  explicit Servers(Agent& agent) : store_service(agent.store_), session_service(agent), report_service(agent) {}

  StoreService store_service;
  SessionService session_service;
  ReportService report_service;
  std::unique_ptr<grpc::Server> server;           // the agent's port (listen)
  std::unique_ptr<grpc::Server> session_server;   // sessions on the private socket: a server with no port
  std::unique_ptr<SessionSocket> session_socket;
  std::unique_ptr<HealthSocket> health_socket;   // reports as datagrams (Python workers); null when it cannot bind
};

// The gRPC credentials run() serves and dials with: made here, at the transport edge, so agent.h names no gRPC type.
struct Agent::Credentials {
  std::shared_ptr<grpc::ServerCredentials> port;   // the agent's port (listen)
  std::shared_ptr<grpc::ChannelCredentials> join;  // --join: dialing the launcher; null without --join
};

}  // namespace dtrain::agent

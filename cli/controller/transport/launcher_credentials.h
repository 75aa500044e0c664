#pragma once

// The launcher's gRPC credentials for an address, by the one transport rule (common/transport.h). The cluster
// secret is read on first TLS use, so a job on private sockets alone never needs one.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "common/transport.h"

namespace dtrain::controller {

class LauncherCredentials {
 public:
  // `insecure`: --insecure; `secret_dir`: "" = the default directory.
  LauncherCredentials(bool insecure, std::string secret_dir) : insecure_(insecure), secret_dir_(std::move(secret_dir)) {}

  // Sessions over the network to or from `address` (a local agent's private socket: kPrivateSocketTransport).
  Transport transport(const std::string& address) const { return session_transport(address, insecure_); }
  // For dialing an agent, and for listening for agents (the join server), with `transport`.
  std::shared_ptr<grpc::ChannelCredentials> channel(Transport transport);
  grpc::ChannelArguments channel_arguments(Transport transport) const;
  std::shared_ptr<grpc::ServerCredentials> server(Transport transport);

 private:
  // Throws security::SecurityError naming the directory and the fix when there is no cluster secret.
  void load_identity();

  bool insecure_;
  std::string secret_dir_;
  std::optional<security::ClusterSecret> secret_;
  security::Identity identity_;
};

}  // namespace dtrain::controller

#include "cli/controller/transport/launcher_credentials.h"

#include "agent/security/credentials.h"
#include "common/grpc/grpc_options.h"

namespace dtrain::controller {

void LauncherCredentials::load_identity() {
  if (secret_) return;
  try {
    secret_ = security::load_secret(secret_dir_.empty() ? security::default_secret_dir() : secret_dir_);
  } catch (const security::SecurityError& e) {
    throw security::SecurityError(std::string(e.what()) + ". Every agent session needs the cluster token, on "
                                  "loopback too (--insecure: plaintext without it, for agents started with --insecure)");
  }
  identity_ = security::issue_identity(*secret_, "launcher");
}

std::shared_ptr<grpc::ChannelCredentials> LauncherCredentials::channel(Transport transport) {
  if (transport == Transport::plaintext) return grpc::InsecureChannelCredentials();
  load_identity();
  return security::channel_credentials(*secret_, identity_);
}

grpc::ChannelArguments LauncherCredentials::channel_arguments(Transport transport) const {
  grpc::ChannelArguments args = session_channel_arguments();
  if (transport == Transport::tls) security::set_tls_target(args);
  return args;
}

std::shared_ptr<grpc::ServerCredentials> LauncherCredentials::server(Transport transport) {
  if (transport == Transport::plaintext) return grpc::InsecureServerCredentials();
  load_identity();
  return security::server_credentials(*secret_, identity_);
}

}  // namespace dtrain::controller

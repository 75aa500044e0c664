#pragma once

// gRPC credentials for launcher <-> agent traffic: mutual TLS with certificates from the cluster CA, plus the
// cluster token on every call (see secret.h for the trust model).
//
// Agent (server):
//   ClusterSecret secret = load_secret(dir);
//   Identity identity = issue_identity(secret, hostname);
//   builder.AddListeningPort(listen, server_credentials(secret, identity), &port);
// Launcher (client):
//   grpc::ChannelArguments args = ...;
//   set_tls_target(args);
//   auto channel = grpc::CreateCustomChannel(address, channel_credentials(secret, identity), args);
//
// What each side checks, in order:
//   1. TLS handshake: the server presents its certificate, the client verifies it against the CA and the name
//      kTlsTargetName; the server requires a client certificate and verifies it against the CA. Both check
//      validity dates.
//   2. Before any handler runs, the server's auth processor requires metadata `dtrain-cluster-token` equal to the
//      cluster token (constant-time compare) and fails the call UNAUTHENTICATED otherwise. The token entry is
//      consumed: handlers never see it. The one exception is a worker certificate (identity.h) of a job the
//      agent runs now: it passes without the token, marked as a worker, and session handlers refuse it.
// The token is sent only over a channel that has privacy and integrity (TLS), never in plaintext.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "common/status.h"
#include "common/transport.h"
#include "worker/credentials.h"

namespace dtrain::security {

// The one DNS name every derived certificate carries and every client verifies (whatever address it dialled),
// and set_tls_target, which makes a channel verify it: written once with the worker's client side.
using worker::kTlsTargetName;
using worker::set_tls_target;
// The call metadata entry that carries the cluster token.
inline constexpr const char* kClusterTokenMetadata = "dtrain-cluster-token";

// Who the caller proved to be, as a property of the call's AuthContext that the token check adds:
//   kRoleMember  cluster token (launcher or agent): may open sessions, use the store and send reports
//   kRoleWorker  a worker certificate (identity.h) of a job this agent runs: the store and reports only; the job
//                id is in kJobProperty. The store and reports still need the round's token on top.
inline constexpr const char* kRoleProperty = "dtrain-role";
inline constexpr const char* kJobProperty = "dtrain-job";
inline constexpr const char* kRoleMember = "member";
inline constexpr const char* kRoleWorker = "worker";

// The jobs whose worker certificates an agent accepts: the job of its current session, none between sessions. So
// a worker certificate opens nothing once its job has ended here, whatever its notAfter says. Thread-safe (the
// token check reads it on gRPC's threads).
class WorkerAdmission {
 public:
  void admit(std::string job_id);
  void close();
  bool admits(std::string_view job_id) const;

 private:
  mutable std::mutex mutex_;
  std::string job_id_;   // "" = none
};

// TLS that requires and verifies a client certificate from the cluster CA, and checks the cluster token. A worker
// certificate passes without the token while `workers` admits its job, as role kRoleWorker; without `workers`
// (a launcher's join server) worker certificates are refused.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const ClusterSecret& secret, const Identity& identity,
                                                            std::shared_ptr<const WorkerAdmission> workers = nullptr);

// Ok when the caller of a call may open a session (AgentService.Session; the launcher's join server needs no such
// check, as its credentials admit no worker certificate at all): it proved the cluster token, or the transport is plaintext (only --insecure, or the private channel between a launcher and the
// local agents it started, serve sessions in plaintext). Otherwise permission_denied saying why not, for the
// caller: a worker's certificate never opens a session.
Status session_refusal(const grpc::AuthContext& context);

// A worker's channel: TLS with its worker certificate, trusting only the cluster CA (`ca_pem`), no cluster token
// (worker/credentials.h). Use with set_tls_target. The store and health reports accept it while the worker's job
// runs.
std::shared_ptr<grpc::ChannelCredentials> worker_channel_credentials(const std::string& ca_pem,
                                                                     const Identity& identity);

// TLS with `identity` as the client certificate, trusting only the cluster CA, plus the cluster token on every
// call. Use with set_tls_target on the channel's arguments.
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ClusterSecret& secret, const Identity& identity);

// Which transport this side used for the call that failed (a peer that hangs up means different things).
using dtrain::Transport;

// One sentence on why a connection or call to `address` failed, for the user: which check failed and what to do,
// with gRPC's own words in parentheses. Best effort: TLS failures reach gRPC 1.51 clients (Debian's, on OpenSSL 3)
// as UNAVAILABLE "failed to connect to all addresses; last error: ..." with these last errors:
//   "UNKNOWN: ipv4:H:P: Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify
//    failed"   this side rejected the peer's certificate: another CA, expired or not yet valid
//   "UNAVAILABLE: ipv4:H:P: Socket closed"   the peer hung up during the handshake: it rejected our certificate
//    (another CA, expired, none), or this side spoke plaintext to a TLS port
//   "UNKNOWN: ipv4:H:P: Ssl handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number"
//    the peer speaks plaintext
//   "UNKNOWN: ipv4:H:P: Peer name H is not in peer certificate"   the channel lacks set_tls_target
// A rejected token comes as UNAUTHENTICATED with the server's message ("cluster token missing", "cluster token
// does not match ...") after a successful handshake.
//
// Channel::WaitForConnected does not end early on a TLS failure: the channel retries with backoff in
// TRANSIENT_FAILURE and WaitForConnected returns false at its deadline, with no reason. A call made with
// wait_for_ready false (the default) fails at once on such a channel with the status above, so make one call to
// learn why. A token failure passes WaitForConnected (the handshake succeeded) and fails the first call.
std::string explain_connect_failure(const std::string& address, const grpc::Status& status,
                                    Transport ours = Transport::tls);
// The same for the text of a failed status (its message); "" when only WaitForConnected failed.
std::string explain_connect_failure(const std::string& address, const std::string& error,
                                    Transport ours = Transport::tls);

// True when `host_port` ("127.0.0.1:7000", "[::1]:7000", "localhost:7000", "unix:/path", or a host alone) can be
// reached only from this machine: plaintext is allowed there without --insecure.
bool is_loopback_address(const std::string& host_port);

}  // namespace dtrain::security

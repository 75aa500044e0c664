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
//      consumed: handlers never see it.
// The token is sent only over a channel that has privacy and integrity (TLS), never in plaintext.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "agent/security/identity.h"
#include "agent/security/secret.h"

namespace dtrain::security {

// The one DNS name every derived certificate carries and every client verifies (whatever address it dialled).
inline constexpr const char* kTlsTargetName = "dtrain.cluster";
// The call metadata entry that carries the cluster token.
inline constexpr const char* kClusterTokenMetadata = "dtrain-cluster-token";

// TLS that requires and verifies a client certificate from the cluster CA, and checks the cluster token.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const ClusterSecret& secret, const Identity& identity);

// TLS with `identity` as the client certificate, trusting only the cluster CA, plus the cluster token on every
// call. Use with set_tls_target on the channel's arguments.
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ClusterSecret& secret, const Identity& identity);

// Makes the channel verify the server's certificate against kTlsTargetName instead of the dialled host name.
void set_tls_target(grpc::ChannelArguments& args);

// Which transport this side used for the call that failed (a peer that hangs up means different things).
enum class Transport { tls, plaintext };

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

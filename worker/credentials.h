#pragma once

// The client side of dtrain's TLS, as a worker uses it to reach its agent (the job's store, health reports), and
// the name every client verifies. The agent's side (server credentials, the cluster token, the certificates
// themselves) is agent/security/; it takes set_tls_target and worker_channel_credentials from here.
//
// A worker holds no cluster token. In a cluster that uses TLS its agent issues it a worker certificate for its job
// and sets DTRAIN_TLS_CA (the cluster CA), DTRAIN_TLS_CERT and DTRAIN_TLS_KEY (that certificate and its key); the
// certificate opens the job's store and health reports, and nothing else, while the job runs. Without
// DTRAIN_TLS_CA the worker speaks plaintext: its agent serves the store and reports in plaintext (a local agent, or
// one started with --insecure; common/transport.h), and each call still carries the round's token.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace dtrain::worker {

// The one DNS name every certificate of a cluster carries and every client verifies (whatever address it dialled).
inline constexpr const char* kTlsTargetName = "dtrain.cluster";

// Makes the channel verify the server's certificate against kTlsTargetName instead of the dialled host name.
void set_tls_target(grpc::ChannelArguments& args);

// TLS with a worker certificate (`key_pem`, `cert_pem`), trusting only the cluster CA (`ca_pem`), no cluster token.
// Use with set_tls_target.
std::shared_ptr<grpc::ChannelCredentials> worker_channel_credentials(const std::string& ca_pem,
                                                                     const std::string& key_pem,
                                                                     const std::string& cert_pem);

// The credentials of this worker's channels to its agent, from its environment: with DTRAIN_TLS_CA set, mutual TLS
// with the files DTRAIN_TLS_CA, DTRAIN_TLS_CERT and DTRAIN_TLS_KEY name (and set_tls_target on `arguments`);
// without it, plaintext. not_found "cannot read VARIABLE (PATH); ..." when one of the files cannot be read.
Result<std::shared_ptr<grpc::ChannelCredentials>> credentials_from_env(grpc::ChannelArguments& arguments);

}  // namespace dtrain::worker

#pragma once

// Which transport a connection between dtrain processes uses: the one place this rule is written. The launcher
// (its sessions to agents, its join server) and the agent (its port, its join client) both ask here, then build
// gRPC credentials for the answer (agent/security/credentials.h).

#include <string_view>

namespace dtrain {

enum class Transport {
  tls,        // mutual TLS with certificates from the cluster CA, plus the cluster token on every call
  plaintext,  // no encryption and no token
};

// A session (launcher <-> agent, in either direction) over the network to or from `address`: TLS on every
// address, loopback and Unix sockets included (every user and container of a host reaches its loopback);
// plaintext only with --insecure (`insecure`), which the caller warns about.
Transport session_transport(std::string_view address, bool insecure);

// A session over the private socket between a launcher and a local agent it started (dtrain agent
// --session-socket): plaintext. The socket lives in a directory only this user can enter (0700), and the agent
// accepts only the process that started it (SO_PEERCRED: same uid, pid = its parent).
inline constexpr Transport kPrivateSocketTransport = Transport::plaintext;

// An agent's TCP port. It serves sessions, so session_transport(listen, insecure) applies, except for a local
// agent whose sessions come over its private socket (`sessions_on_socket`): its port then serves only the store
// and health reports, each of which checks the round's token, in plaintext.
Transport agent_port_transport(std::string_view listen, bool sessions_on_socket, bool insecure);

}  // namespace dtrain

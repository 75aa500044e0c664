#pragma once

// TLS session tickets off for every TLS context this process makes.
//
// After each TLS 1.3 handshake a server sends two session tickets by default, so that the client can resume later
// without a full handshake. dtrain's clients never resume (an agent dials its launcher once, a worker its agent
// once; none keeps a session cache), and OpenSSL 3.0 builds each ticket by re-encoding and re-parsing the session,
// client certificate included: with 2,048 agents joining, the tickets were 21% of the launcher's handshake CPU
// (BENCHMARKS.md, "The launcher at 4,096 agents"). gRPC gives no access to its SSL_CTX, so the setting goes where
// OpenSSL applies it to every context it makes: the "system_default" section of its configuration (NumTickets = 0).
// The system's own ssl_conf sections (say, a MinProtocol in /etc/ssl/openssl.cnf) are read and kept.

namespace dtrain::security {

// Idempotent and thread-safe; call it before the first server credentials are built. Returns false when OpenSSL
// refused the configuration: the tickets then stay on, which costs CPU and nothing else.
bool disable_session_tickets();

}  // namespace dtrain::security

#pragma once

// The cluster secret: a CA (key + self-signed certificate) and a cluster token, in one directory that every node
// of the cluster holds a copy of, like a shared SSH key.
//
// Trust model. Whoever can read the secret directory is a member of the cluster: an agent runs commands for any
// launcher that proves membership, and a launcher drives any agent that does. Proof is two things on every call:
//   1. mutual TLS with a certificate signed by the cluster CA (each agent and launcher derives its own key and
//      certificate from the CA at start, see identity.h), which also encrypts the traffic, and
//   2. the cluster token in the `dtrain-cluster-token` metadata entry, checked before any handler runs.
// Both come from the same directory, so they are one secret, not two factors. The CA gives standard TLS
// (encryption, peer authentication in the handshake, no per-node certificate distribution); the token gives a
// per-call check with an error message that says what was wrong, where TLS failures are opaque. Because every
// node holds the CA key, certificates do not identify nodes and cannot be revoked one by one: to expel a node,
// run `dtrain secret init --force` and copy the new directory to the remaining nodes.
//
// Layout of the directory (mode 0700, files 0600; load_secret insists on 0600 or tighter for ca.key and token):
//   ca.key   PEM PKCS#8 EC P-256 private key of the CA
//   ca.crt   PEM self-signed CA certificate, CN "dtrain cluster CA", 10 years
//   token    64 hex digits (32 random bytes) and a newline

#include <stdexcept>
#include <string>

namespace dtrain::security {

inline constexpr const char* kCaKeyFile = "ca.key";
inline constexpr const char* kCaCertFile = "ca.crt";
inline constexpr const char* kTokenFile = "token";

// A failure to create, read or use the secret. The message says what was wrong, where, and what to do.
class SecurityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ClusterSecret {
  std::string dir;          // where it was loaded from (for messages)
  std::string ca_cert_pem;  // the CA certificate: the only root that peers' certificates are checked against
  std::string ca_key_pem;   // signs the certificates that agents and launchers derive at start
  std::string token;        // sent and checked on every call as `dtrain-cluster-token`
};

// $DTRAIN_SECRET_DIR when set and not empty, else $HOME/.dtrain (the password database's home when HOME is unset).
std::string default_secret_dir();

// Creates a new CA and token in `dir` (created with mode 0700 when missing, tightened to 0700 when it exists).
// Each file is written to a temporary file (0600) in `dir` and renamed into place, so a reader never sees half a
// file. Without `force`, refuses (SecurityError naming the files) when any of the secret's files already exists.
void init_secret(const std::string& dir, bool force);

// Reads the secret in `dir`. Refuses, like ssh, a key or token file that group or others can read, and a CA key
// that does not belong to the CA certificate.
ClusterSecret load_secret(const std::string& dir);

}  // namespace dtrain::security

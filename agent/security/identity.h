#pragma once

// Certificates that agents and launchers derive from the cluster CA when they start (see secret.h for the trust
// model). Every certificate names the same DNS name, kTlsTargetName in credentials.h: it says "member of this
// cluster", not which host, because any member holds the CA key and could mint a certificate for any name. Clients
// verify that name through the target-name override, so agents can be reached by any address (IP, alias, NAT).

#include <chrono>
#include <string>

#include "agent/security/secret.h"

namespace dtrain::security {

struct Identity {
  std::string key_pem;   // PEM PKCS#8 EC P-256 private key, made fresh for this identity
  std::string cert_pem;  // PEM certificate signed by the cluster CA
};

// Peers' clocks may disagree by this much before a fresh certificate looks "not yet valid".
inline constexpr std::chrono::seconds kClockSkewAllowance{3600};
// A derived certificate lives as long as the CA (its end is clamped to the CA's): a shorter life would buy no
// security when every node holds the CA key, and would make a long-running agent fail handshakes one day.
inline constexpr std::chrono::seconds kDefaultIdentityValidity{std::chrono::hours(24 * 3660)};

// Issues a certificate for `common_name` (for logs only; the host name, "agent", "launcher") with a new EC key,
// a random serial, SAN DNS:dtrain.cluster, extendedKeyUsage serverAuth + clientAuth, valid from
// now + not_before_offset for `validity`. A negative offset tolerates clock skew; tests pass an offset and validity
// that make a certificate that has already expired.
Identity issue_identity(const ClusterSecret& secret, const std::string& common_name,
                        std::chrono::seconds not_before_offset = -kClockSkewAllowance,
                        std::chrono::seconds validity = kDefaultIdentityValidity);

}  // namespace dtrain::security

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

// Workers get least privilege, like a Kubernetes pod's bound service-account token or a Nomad task's workload
// identity: a certificate that names its role and its job, and nothing that makes it a cluster member. It carries
// the URI SAN kWorkerUriPrefix + job id, no DNS name and extendedKeyUsage clientAuth only (clients verify the name
// kTlsTargetName, so a worker cannot pose as an agent or a launcher), and a validity of kWorkerIdentityValidity.
// Agents accept it (without the cluster token) only while they run that job, and only for the store and health
// reports; it opens no session with any agent or launcher (credentials.h: WorkerAdmission, session_refusal).
inline constexpr const char* kWorkerUriPrefix = "spiffe://dtrain.cluster/worker/";
// An upper bound, not the real limit: a worker certificate opens nothing once its job has ended on the agent it
// calls. The bound stops a copied certificate from living on for years; agents issue a fresh one for every job.
inline constexpr std::chrono::seconds kWorkerIdentityValidity{std::chrono::hours(24 * 30)};

// True when `job_id` can name a job everywhere it appears: a certificate's URI, a directory. 1 to 128 characters
// of [A-Za-z0-9._-], not "." or "..". Launchers make ids of the spec name (already [a-z0-9-]+) and a timestamp.
bool is_valid_job_id(const std::string& job_id);

// A worker certificate for job `job_id` on `host` (the common name, for logs). Throws SecurityError for an id that
// is_valid_job_id refuses.
Identity issue_worker_identity(const ClusterSecret& secret, const std::string& job_id, const std::string& host,
                               std::chrono::seconds validity = kWorkerIdentityValidity);

}  // namespace dtrain::security

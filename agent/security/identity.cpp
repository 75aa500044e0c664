#include "agent/security/identity.h"

#include "agent/security/credentials.h"
#include "agent/security/x509.h"

namespace dtrain::security {

Identity issue_identity(const ClusterSecret& secret, const std::string& common_name,
                        std::chrono::seconds not_before_offset, std::chrono::seconds validity) {
  if (validity.count() <= 0) throw SecurityError("issue_identity: the validity must be positive");
  x509::CertificateSpec spec;
  // X.509 limits a common name to 64 characters; the name is for logs, so a long host name is cut.
  spec.common_name = common_name.empty() ? "dtrain" : common_name.substr(0, 64);
  spec.dns_names = {kTlsTargetName};
  spec.not_before_offset = not_before_offset;
  spec.validity = validity;
  Identity ca{secret.ca_key_pem, secret.ca_cert_pem};
  try {
    return x509::make_certificate(spec, &ca);
  } catch (const SecurityError& e) {
    throw SecurityError("cannot issue a certificate from the cluster CA in " + secret.dir + ": " + e.what());
  }
}

bool is_valid_job_id(const std::string& job_id) {
  if (job_id.empty() || job_id.size() > 128 || job_id == "." || job_id == "..") return false;
  for (char c : job_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Identity issue_worker_identity(const ClusterSecret& secret, const std::string& job_id, const std::string& host,
                               std::chrono::seconds validity) {
  if (!is_valid_job_id(job_id)) {
    throw SecurityError("cannot issue a worker certificate for job id \"" + job_id +
                        "\": a job id is 1 to 128 characters of [A-Za-z0-9._-]");
  }
  x509::CertificateSpec spec;
  spec.common_name = ("worker@" + host).substr(0, 64);
  spec.client_only = true;
  spec.uris = {kWorkerUriPrefix + job_id};
  spec.not_before_offset = -kClockSkewAllowance;
  spec.validity = validity + kClockSkewAllowance;
  Identity ca{secret.ca_key_pem, secret.ca_cert_pem};
  try {
    return x509::make_certificate(spec, &ca);
  } catch (const SecurityError& e) {
    throw SecurityError("cannot issue a worker certificate from the cluster CA in " + secret.dir + ": " + e.what());
  }
}

}  // namespace dtrain::security

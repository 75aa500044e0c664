#include "agent/security/credentials.h"

#include <grpc/grpc_security_constants.h>

#include <optional>
#include <string_view>

#include "agent/security/session_tickets.h"
#include "agent/security/x509.h"
#include "common/address.h"

namespace dtrain::security {
namespace {

// Requires the cluster token on every call, or a worker certificate of an admitted job. Process runs on gRPC's
// thread before the call reaches a handler; it reads immutable state and the admission (a short lock), so it is
// thread-safe and need not be offloaded (IsBlocking is false).
class ClusterTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  ClusterTokenProcessor(std::string token, std::shared_ptr<const WorkerAdmission> workers)
      : token_(std::move(token)), workers_(std::move(workers)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata*) override {
    auto entry = auth_metadata.find(kClusterTokenMetadata);
    if (auto job = worker_job(*context)) {
      // A worker certificate is a worker whatever else the call carries: it never becomes a member.
      if (!workers_ || !workers_->admits(*job)) {
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            "a worker certificate of job " + *job + " opens only that job's store and health "
                            "reports, on its agents, while the job runs; this " +
                                std::string(workers_ ? "agent" : "launcher") + " does not run it");
      }
      if (entry != auth_metadata.end()) {
        consumed->emplace(kClusterTokenMetadata, std::string(entry->second.data(), entry->second.size()));
      }
      context->AddProperty(kRoleProperty, kRoleWorker);
      context->AddProperty(kJobProperty, *job);
      return grpc::Status::OK;
    }
    if (entry == auth_metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "cluster token missing");
    }
    std::string presented(entry->second.data(), entry->second.size());
    if (!x509::constant_time_equal(presented, token_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "cluster token does not match this agent's (check that launcher and agents use the same "
                          "`dtrain secret init` directory)");
    }
    consumed->emplace(kClusterTokenMetadata, std::move(presented));
    context->AddProperty(kRoleProperty, kRoleMember);
    return grpc::Status::OK;
  }

 private:
  // The job of a worker certificate (its URI SAN under kWorkerUriPrefix), if the peer presented one.
  static std::optional<std::string> worker_job(const grpc::AuthContext& context) {
    for (const grpc::string_ref& uri : context.FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
      std::string_view text(uri.data(), uri.size());
      if (text.rfind(kWorkerUriPrefix, 0) == 0) {
        return std::string(text.substr(std::string_view(kWorkerUriPrefix).size()));
      }
    }
    return std::nullopt;
  }

  const std::string token_;
  const std::shared_ptr<const WorkerAdmission> workers_;
};

// Adds the cluster token to every call. gRPC sends call credentials only on channels with privacy and integrity.
class ClusterTokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit ClusterTokenPlugin(std::string token) : token_(std::move(token)) {}

  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "dtrain-cluster-token"; }

  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                           std::multimap<std::string, std::string>* metadata) override {
    metadata->emplace(kClusterTokenMetadata, token_);
    return grpc::Status::OK;
  }

  std::string DebugString() override { return "dtrain cluster token"; }

 private:
  const std::string token_;
};

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// gRPC's connect errors read "failed to connect to all addresses; last error: CODE: ipv4:H:P: WHAT"; returns WHAT
// (or the whole text when it has another form). Addresses contain ':' but never ": ".
std::string last_error(const std::string& error) {
  static constexpr std::string_view kLastError = "last error: ";
  auto at = error.find(kLastError);
  if (at == std::string::npos) return error;
  std::string rest = error.substr(at + kLastError.size());
  for (const char* prefix : {"UNKNOWN: ", "UNAVAILABLE: "}) {
    if (rest.rfind(prefix, 0) == 0) rest = rest.substr(std::string_view(prefix).size());
  }
  for (const char* scheme : {"ipv4:", "ipv6:", "unix:"}) {
    if (rest.rfind(scheme, 0) == 0) {
      auto end = rest.find(": ");
      if (end != std::string::npos) rest = rest.substr(end + 2);
    }
  }
  return rest;
}

}  // namespace

void WorkerAdmission::admit(std::string job_id) {
  std::lock_guard lock(mutex_);
  job_id_ = std::move(job_id);
}

void WorkerAdmission::close() {
  std::lock_guard lock(mutex_);
  job_id_.clear();
}

bool WorkerAdmission::admits(std::string_view job_id) const {
  std::lock_guard lock(mutex_);
  return !job_id_.empty() && job_id == job_id_;
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const ClusterSecret& secret, const Identity& identity,
                                                            std::shared_ptr<const WorkerAdmission> workers) {
  // No client of a dtrain server resumes a session: tickets would only cost each handshake CPU.
  disable_session_tickets();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = secret.ca_cert_pem;
  options.pem_key_cert_pairs.push_back({identity.key_pem, identity.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  credentials->SetAuthMetadataProcessor(std::make_shared<ClusterTokenProcessor>(secret.token, std::move(workers)));
  return credentials;
}

Status session_refusal(const grpc::AuthContext& context) {
  const auto type = context.FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  if (type.empty() || type.front() != "ssl") return {};
  const auto role = context.FindPropertyValues(kRoleProperty);
  if (!role.empty() && role.front() == kRoleMember) return {};
  if (!role.empty() && role.front() == kRoleWorker) {
    return {StatusCode::permission_denied,
            "a worker's certificate cannot open a session (workers may use their job's store and send health "
            "reports, nothing else); sessions need the cluster secret (`dtrain secret init`)"};
  }
  return {StatusCode::permission_denied,
          "the caller did not present the cluster token; sessions need the cluster secret (`dtrain secret init`)"};
}

std::shared_ptr<grpc::ChannelCredentials> worker_channel_credentials(const std::string& ca_pem,
                                                                     const Identity& identity) {
  return worker::worker_channel_credentials(ca_pem, identity.key_pem, identity.cert_pem);
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ClusterSecret& secret, const Identity& identity) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = secret.ca_cert_pem;
  options.pem_private_key = identity.key_pem;
  options.pem_cert_chain = identity.cert_pem;
  return grpc::CompositeChannelCredentials(
      grpc::SslCredentials(options),
      grpc::MetadataCredentialsFromPlugin(std::make_unique<ClusterTokenPlugin>(secret.token)));
}

std::string explain_connect_failure(const std::string& address, const grpc::Status& status, Transport ours) {
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return address + " refused the call: " + status.error_message();
  }
  return explain_connect_failure(address, status.error_message(), ours);
}

std::string explain_connect_failure(const std::string& address, const std::string& error, Transport ours) {
  if (error.empty()) {
    return "cannot connect to " + address + "; is `dtrain agent` running there and is the port reachable?";
  }
  if (contains(error, "cluster token")) return address + " refused the call: " + error;
  std::string said = " (gRPC: " + last_error(error) + ")";
  if (contains(error, "wrong version number")) {
    return address + " speaks plaintext (started with --insecure?)" + said;
  }
  if (contains(error, "Socket closed") && ours == Transport::plaintext) {
    return address + " closed the connection: it requires TLS (it was started without --insecure); give this side "
           "the cluster secret instead of --insecure" + said;
  }
  if (contains(error, "is not in peer certificate")) {
    return "TLS handshake with " + address + " failed: the peer's certificate is not for " + kTlsTargetName +
           " (the channel lacks set_tls_target, or the peer is not a dtrain agent)" + said;
  }
  if (contains(error, "Ssl handshake failed") || contains(error, "Socket closed") || contains(error, "Handshake")) {
    return "TLS handshake with " + address +
           " failed: the peer's certificate is not signed by this cluster's CA, has expired, or the peer rejected "
           "ours; check both sides use the same secret dir and the clocks agree" + said;
  }
  if (contains(error, "Connection refused")) {
    return "nothing listens on " + address + "; is `dtrain agent` running there?" + said;
  }
  return address + ": " + error;
}

bool is_loopback_address(const std::string& host_port) {
  std::string text = host_port;
  if (text.rfind("unix:", 0) == 0 || text.rfind("unix-abstract:", 0) == 0) return true;
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (text.rfind(scheme, 0) == 0) text = text.substr(std::string(scheme).size());
  }
  std::string host;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) return false;
    host = text.substr(1, close - 1);
  } else if (text.find(':') != text.rfind(':')) {
    host = text;  // an IPv6 address without brackets has no port
  } else {
    host = host_of(text);
  }
  return is_loopback_host(host);
}

}  // namespace dtrain::security

#include "worker/credentials.h"

#include <cstdlib>

#include "common/io/bounded_file.h"

namespace dtrain::worker {
namespace {

// A PEM file (CA, key or certificate chain) is a few KiB; the bound only keeps a FIFO or /dev/zero from hanging or
// filling the worker.
constexpr std::size_t kMaxPemFileBytes = 64 * 1024;

// The contents of the file the variable `name` names, read as every file a user names is (common/io/bounded_file.h).
Result<std::string> read_variable_file(const char* name) {
  const char* value = std::getenv(name);
  const std::string path = value ? value : "";
  Result<std::string> text;
  if (!path.empty()) text = read_bounded_file(path, FileBound{kMaxPemFileBytes});
  if (path.empty() || !text.ok()) {
    return {Status(StatusCode::not_found, std::string("cannot read ") + name + " (" +
                                              (path.empty() ? "unset" : path) +
                                              "); the agent writes the worker's TLS files when the cluster uses TLS")};
  }
  return text;
}

}  // namespace

void set_tls_target(grpc::ChannelArguments& args) { args.SetSslTargetNameOverride(kTlsTargetName); }

std::shared_ptr<grpc::ChannelCredentials> worker_channel_credentials(const std::string& ca_pem,
                                                                     const std::string& key_pem,
                                                                     const std::string& cert_pem) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem;
  options.pem_private_key = key_pem;
  options.pem_cert_chain = cert_pem;
  return grpc::SslCredentials(options);
}

Result<std::shared_ptr<grpc::ChannelCredentials>> credentials_from_env(grpc::ChannelArguments& arguments) {
  const char* ca = std::getenv("DTRAIN_TLS_CA");
  if (ca == nullptr || *ca == '\0') return {{}, grpc::InsecureChannelCredentials()};
  const Result<std::string> ca_pem = read_variable_file("DTRAIN_TLS_CA");
  if (!ca_pem.ok()) return {ca_pem.status};
  const Result<std::string> key_pem = read_variable_file("DTRAIN_TLS_KEY");
  if (!key_pem.ok()) return {key_pem.status};
  const Result<std::string> cert_pem = read_variable_file("DTRAIN_TLS_CERT");
  if (!cert_pem.ok()) return {cert_pem.status};
  set_tls_target(arguments);
  return {{}, worker_channel_credentials(ca_pem.value, key_pem.value, cert_pem.value)};
}

}  // namespace dtrain::worker

// The cluster secret on disk and the certificates derived from it, checked with OpenSSL's own verifier.
#include <doctest/doctest.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "agent/security/identity.h"
#include "agent/security/secret.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/contains.h"

using namespace std::chrono_literals;
using dtrain::security::ClusterSecret;
using dtrain::security::Identity;
using dtrain::security::SecurityError;
namespace fs = std::filesystem;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

template <class Body>
std::string security_error(Body body) {
  try {
    body();
  } catch (const SecurityError& error) {
    return error.what();
  }
  FAIL("expected a SecurityError");
  return "";
}

using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;

X509Ptr parse(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free);
  REQUIRE(cert);
  return cert;
}

// OpenSSL's verdict on `leaf` with `ca` as the only trusted root (X509_V_OK when it verifies).
int verify(const std::string& ca, const std::string& leaf) {
  X509Ptr root = parse(ca);
  X509Ptr cert = parse(leaf);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), root.get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> context(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  X509_STORE_CTX_init(context.get(), store.get(), cert.get(), nullptr);
  X509_STORE_CTX_set_purpose(context.get(), X509_PURPOSE_SSL_SERVER);
  X509_verify_cert(context.get());
  return X509_STORE_CTX_get_error(context.get());
}

}  // namespace

TEST_CASE("init_secret writes a private directory that load_secret reads back") {
  TempDir temp{"dtrain-secret-test"};
  std::string dir = temp.path + "/nested/secret";
  dtrain::security::init_secret(dir, false);
  CHECK(mode_of(dir) == 0700);
  for (const char* file : {"ca.key", "ca.crt", "token"}) CHECK(mode_of(dir + "/" + file) == 0600);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 3);  // no temporary file left

  ClusterSecret secret = dtrain::security::load_secret(dir);
  CHECK(secret.dir == dir);
  CHECK(secret.token.size() == 64);
  CHECK(secret.token.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(read_text(dir + "/token") == secret.token + "\n");
  CHECK(contains(secret.ca_key_pem, "BEGIN PRIVATE KEY"));

  X509Ptr ca = parse(secret.ca_cert_pem);
  CHECK(X509_check_ca(ca.get()) == 1);
  char name[128] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(ca.get()), NID_commonName, name, sizeof name);
  CHECK(std::string(name) == "dtrain cluster CA");
  int days = 0, seconds = 0;
  REQUIRE(ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(ca.get())) == 1);
  CHECK(days >= 3650);
  CHECK(days <= 3655);
  CHECK(EVP_PKEY_get_base_id(X509_get0_pubkey(ca.get())) == EVP_PKEY_EC);
}

TEST_CASE("init_secret refuses to replace a secret unless forced") {
  TempDir temp{"dtrain-secret-test"};
  dtrain::security::init_secret(temp.path, false);
  ClusterSecret first = dtrain::security::load_secret(temp.path);
  std::string error = security_error([&] { dtrain::security::init_secret(temp.path, false); });
  CHECK(contains(error, temp.path + "/ca.key"));
  CHECK(contains(error, temp.path + "/ca.crt"));
  CHECK(contains(error, temp.path + "/token"));
  CHECK(contains(error, "--force"));
  CHECK(dtrain::security::load_secret(temp.path).token == first.token);

  fs::remove(temp.path + "/ca.key");  // any one file left behind is enough to refuse
  fs::remove(temp.path + "/ca.crt");
  error = security_error([&] { dtrain::security::init_secret(temp.path, false); });
  CHECK(contains(error, temp.path + "/token"));
  CHECK_FALSE(contains(error, "ca.key"));

  dtrain::security::init_secret(temp.path, true);
  ClusterSecret second = dtrain::security::load_secret(temp.path);
  CHECK(second.token != first.token);
  CHECK(second.ca_cert_pem != first.ca_cert_pem);
}

TEST_CASE("init_secret tightens an existing directory to 0700") {
  TempDir temp{"dtrain-secret-test"};
  REQUIRE(::chmod(temp.path.c_str(), 0755) == 0);
  dtrain::security::init_secret(temp.path, false);
  CHECK(mode_of(temp.path) == 0700);
}

TEST_CASE("load_secret names what is missing and how to make it") {
  TempDir temp{"dtrain-secret-test"};
  std::string missing = temp.path + "/nowhere";
  std::string error = security_error([&] { dtrain::security::load_secret(missing); });
  CHECK(error == "no cluster secret in " + missing + ": run `dtrain secret init --dir " + missing +
                     "` on one node and copy " + missing + " to every node (mode 0700)");

  dtrain::security::init_secret(temp.path, false);
  fs::remove(temp.path + "/ca.crt");
  error = security_error([&] { dtrain::security::load_secret(temp.path); });
  CHECK(contains(error, temp.path + "/ca.crt"));
  CHECK(contains(error, "dtrain secret init --dir " + temp.path));
}

TEST_CASE("load_secret refuses a certificate that is a FIFO or too large, at once and naming it") {
  TempDir temp{"dtrain-secret-test"};
  dtrain::security::init_secret(temp.path, false);
  const std::string cert = temp.path + "/ca.crt";
  fs::remove(cert);
  REQUIRE(::mkfifo(cert.c_str(), 0600) == 0);  // nobody writes it: a blocking read would wait forever
  std::string error = security_error([&] { dtrain::security::load_secret(temp.path); });
  CHECK(contains(error, cert + " is a FIFO (named pipe), not a regular file"));
  fs::remove(cert);
  std::ofstream(cert) << std::string(64 * 1024 + 1, 'x');
  error = security_error([&] { dtrain::security::load_secret(temp.path); });
  CHECK(contains(error, cert + " is 65537 bytes, more than the 65536 read here"));
}

TEST_CASE("load_secret refuses a key or token that others can read, like ssh") {
  TempDir temp{"dtrain-secret-test"};
  dtrain::security::init_secret(temp.path, false);
  std::string token = temp.path + "/token";
  REQUIRE(::chmod(token.c_str(), 0644) == 0);
  std::string error = security_error([&] { dtrain::security::load_secret(temp.path); });
  CHECK(contains(error, "permissions 0644 for " + token + " are too open"));
  CHECK(contains(error, "chmod 600 " + token));

  REQUIRE(::chmod(token.c_str(), 0600) == 0);
  std::string key = temp.path + "/ca.key";
  REQUIRE(::chmod(key.c_str(), 0640) == 0);
  error = security_error([&] { dtrain::security::load_secret(temp.path); });
  CHECK(contains(error, "permissions 0640 for " + key));
  CHECK(contains(error, "chmod 600 " + key));

  REQUIRE(::chmod(key.c_str(), 0400) == 0);  // tighter than 0600 is fine
  CHECK_NOTHROW(dtrain::security::load_secret(temp.path));
}

TEST_CASE("load_secret refuses a CA key and certificate from different secrets") {
  TempDir first{"dtrain-secret-test"}, second{"dtrain-secret-test"};
  dtrain::security::init_secret(first.path, false);
  dtrain::security::init_secret(second.path, false);
  fs::copy_file(second.path + "/ca.crt", first.path + "/ca.crt", fs::copy_options::overwrite_existing);
  std::string error = security_error([&] { dtrain::security::load_secret(first.path); });
  CHECK(contains(error, first.path + "/ca.key is not the key of " + first.path + "/ca.crt"));
}

TEST_CASE("default_secret_dir honours DTRAIN_SECRET_DIR, else ~/.dtrain") {
  const char* saved = std::getenv("DTRAIN_SECRET_DIR");
  std::string saved_value = saved ? saved : "";
  ::setenv("DTRAIN_SECRET_DIR", "/somewhere/secret", 1);
  CHECK(dtrain::security::default_secret_dir() == "/somewhere/secret");
  ::unsetenv("DTRAIN_SECRET_DIR");
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  if (!home.empty()) CHECK(dtrain::security::default_secret_dir() == (fs::path(home) / ".dtrain").string());
  if (saved) ::setenv("DTRAIN_SECRET_DIR", saved_value.c_str(), 1);
}

TEST_CASE("issue_identity makes a certificate the CA verifies for dtrain.cluster, client and server") {
  TempDir temp{"dtrain-secret-test"}, other{"dtrain-secret-test"};
  dtrain::security::init_secret(temp.path, false);
  dtrain::security::init_secret(other.path, false);
  ClusterSecret secret = dtrain::security::load_secret(temp.path);
  ClusterSecret wrong = dtrain::security::load_secret(other.path);

  Identity identity = dtrain::security::issue_identity(secret, "node-7");
  CHECK(verify(secret.ca_cert_pem, identity.cert_pem) == X509_V_OK);
  CHECK(verify(wrong.ca_cert_pem, identity.cert_pem) == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);

  X509Ptr cert = parse(identity.cert_pem);
  CHECK(X509_check_host(cert.get(), "dtrain.cluster", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert.get(), "node-7", 0, 0, nullptr) == 0);
  CHECK(X509_check_ca(cert.get()) == 0);
  CHECK((X509_get_extension_flags(cert.get()) & EXFLAG_XKUSAGE) != 0);
  constexpr std::uint32_t kServerAndClient = XKU_SSL_SERVER | XKU_SSL_CLIENT;
  CHECK((X509_get_extended_key_usage(cert.get()) & kServerAndClient) == kServerAndClient);
  CHECK(X509_check_purpose(cert.get(), X509_PURPOSE_SSL_CLIENT, 0) == 1);
  CHECK(X509_check_purpose(cert.get(), X509_PURPOSE_SSL_SERVER, 0) == 1);
  char name[128] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, name, sizeof name);
  CHECK(std::string(name) == "node-7");
  // Valid an hour before now (clock skew), and no longer than the CA.
  CHECK(X509_cmp_time(X509_get0_notBefore(cert.get()), nullptr) < 0);
  X509Ptr ca = parse(secret.ca_cert_pem);
  CHECK(ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(ca.get())) <= 0);

  Identity again = dtrain::security::issue_identity(secret, "node-7");
  CHECK(again.key_pem != identity.key_pem);
  X509Ptr again_cert = parse(again.cert_pem);
  CHECK(ASN1_INTEGER_cmp(X509_get0_serialNumber(again_cert.get()), X509_get0_serialNumber(cert.get())) != 0);
}

TEST_CASE("issue_identity can make a certificate that has already expired") {
  TempDir temp{"dtrain-secret-test"};
  dtrain::security::init_secret(temp.path, false);
  ClusterSecret secret = dtrain::security::load_secret(temp.path);
  Identity expired = dtrain::security::issue_identity(secret, "old", -2h, 1h);
  CHECK(verify(secret.ca_cert_pem, expired.cert_pem) == X509_V_ERR_CERT_HAS_EXPIRED);
  Identity future = dtrain::security::issue_identity(secret, "future", 2h, 1h);
  CHECK(verify(secret.ca_cert_pem, future.cert_pem) == X509_V_ERR_CERT_NOT_YET_VALID);
}

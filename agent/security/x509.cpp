#include "agent/security/x509.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace dtrain::security::x509 {
namespace {

template <auto Free>
struct Deleter {
  template <class T>
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using Extension = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using Bignum = std::unique_ptr<BIGNUM, Deleter<BN_free>>;

// OpenSSL's queued reasons, oldest first, and clears the queue.
std::string openssl_reason() {
  std::string reason;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    if (!reason.empty()) reason += "; ";
    reason += text;
  }
  return reason.empty() ? "no reason given" : reason;
}

[[noreturn]] void fail(const std::string& what) { throw SecurityError(what + " (OpenSSL: " + openssl_reason() + ")"); }

Key new_ec_key() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) fail("cannot generate an EC P-256 key");
  return key;
}

Bio memory_bio(const std::string& text) {
  Bio bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
  if (!bio) fail("out of memory");
  return bio;
}

std::string bio_text(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<std::size_t>(n));
}

Key read_key(const std::string& pem, const std::string& where) {
  Bio bio = memory_bio(pem);
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) fail(where + " holds no readable PEM private key");
  return key;
}

Cert read_cert(const std::string& pem, const std::string& where) {
  Bio bio = memory_bio(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) fail(where + " holds no readable PEM certificate");
  return cert;
}

std::string key_pem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    fail("cannot encode a private key as PEM");
  }
  return bio_text(bio.get());
}

std::string cert_pem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) fail("cannot encode a certificate as PEM");
  return bio_text(bio.get());
}

void add_extension(X509* cert, X509V3_CTX* context, int nid, const std::string& value) {
  Extension extension(X509V3_EXT_conf_nid(nullptr, context, nid, value.c_str()));
  if (!extension || X509_add_ext(cert, extension.get(), -1) != 1) fail("cannot add certificate extension " + value);
}

// A random positive 127-bit serial (RFC 5280 allows up to 20 octets; random serials keep certificates distinct).
void set_random_serial(X509* cert) {
  Bignum serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert)) == nullptr) {
    fail("cannot make a certificate serial number");
  }
}

}  // namespace

Identity make_certificate(const CertificateSpec& spec, const Identity* issuer) {
  Key key = new_ec_key();
  Cert cert(X509_new());
  if (!cert) fail("out of memory");
  Key issuer_key;
  Cert issuer_cert;
  if (issuer != nullptr) {
    issuer_key = read_key(issuer->key_pem, "the CA key");
    issuer_cert = read_cert(issuer->cert_pem, "the CA certificate");
  }
  X509* signer_cert = issuer_cert ? issuer_cert.get() : cert.get();
  EVP_PKEY* signer_key = issuer_key ? issuer_key.get() : key.get();

  X509_set_version(cert.get(), X509_VERSION_3);
  set_random_serial(cert.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1, -1, 0) != 1) {
    fail("cannot set the certificate's common name to \"" + spec.common_name + "\"");
  }
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer_cert));
  long offset = static_cast<long>(spec.not_before_offset.count());
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), offset);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), offset + static_cast<long>(spec.validity.count()));
  if (issuer_cert && ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(issuer_cert.get())) > 0) {
    X509_set1_notAfter(cert.get(), X509_get0_notAfter(issuer_cert.get()));
  }
  if (X509_set_pubkey(cert.get(), key.get()) != 1) fail("cannot set the certificate's public key");

  X509V3_CTX context;
  X509V3_set_ctx(&context, signer_cert, cert.get(), nullptr, nullptr, 0);
  add_extension(cert.get(), &context, NID_subject_key_identifier, "hash");
  if (spec.is_ca) {
    add_extension(cert.get(), &context, NID_basic_constraints, "critical,CA:TRUE");
    add_extension(cert.get(), &context, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_extension(cert.get(), &context, NID_authority_key_identifier, "keyid:always");
    add_extension(cert.get(), &context, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert.get(), &context, NID_key_usage, "critical,digitalSignature,keyAgreement");
    add_extension(cert.get(), &context, NID_ext_key_usage, spec.client_only ? "clientAuth" : "serverAuth,clientAuth");
  }
  std::string names;
  for (const std::string& dns : spec.dns_names) names += (names.empty() ? "DNS:" : ",DNS:") + dns;
  for (const std::string& uri : spec.uris) names += (names.empty() ? "URI:" : ",URI:") + uri;
  if (!names.empty()) add_extension(cert.get(), &context, NID_subject_alt_name, names);
  if (X509_sign(cert.get(), signer_key, EVP_sha256()) == 0) fail("cannot sign the certificate");
  return Identity{key_pem(key.get()), cert_pem(cert.get())};
}

void check_ca(const std::string& key_pem_text, const std::string& key_path, const std::string& cert_pem_text,
              const std::string& cert_path) {
  Key key = read_key(key_pem_text, key_path);
  Cert cert = read_cert(cert_pem_text, cert_path);
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    throw SecurityError(key_path + " is not the key of " + cert_path +
                        " (the files come from different `dtrain secret init` runs): copy the whole directory again "
                        "from the node where it was made");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    throw SecurityError("the cluster CA in " + cert_path +
                        " has expired: run `dtrain secret init --force` and copy the directory to every node");
  }
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  // The kernel's generator, as RAND_bytes seeds itself from: the same quality without initialising OpenSSL (its
  // configuration file and providers), which a job on local agents otherwise does for its tokens alone.
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw SecurityError("the random generator failed: getrandom: " + std::string(std::strerror(errno)));
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char c : raw) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  OPENSSL_cleanse(raw.data(), raw.size());
  return hex;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace dtrain::security::x509

#pragma once

// OpenSSL plumbing shared by secret.cpp and identity.cpp: EC keys, certificates, PEM, randomness. Internal to
// dtrain_security (no OpenSSL type crosses this header); errors are SecurityError with OpenSSL's reason appended.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "agent/security/identity.h"

namespace dtrain::security::x509 {

struct CertificateSpec {
  std::string common_name;
  bool is_ca = false;                       // CA:TRUE + keyCertSign, else CA:FALSE + serverAuth/clientAuth
  bool client_only = false;                 // extendedKeyUsage clientAuth alone: cannot serve TLS (workers)
  std::vector<std::string> dns_names;       // subjectAltName DNS entries
  std::vector<std::string> uris;            // subjectAltName URI entries (a worker's SPIFFE-style identity)
  std::chrono::seconds not_before_offset{};  // notBefore = now + this
  std::chrono::seconds validity{};           // notAfter = notBefore + this (clamped to the issuer's notAfter)
};

// A new EC P-256 key and a certificate for it: self-signed when `issuer` is null, else signed by issuer's key.
Identity make_certificate(const CertificateSpec& spec, const Identity* issuer);

// Throws SecurityError (naming the paths the texts were read from) unless both parse, `key_pem` is the private
// key of `cert_pem`, and the certificate has not expired.
void check_ca(const std::string& key_pem, const std::string& key_path, const std::string& cert_pem,
              const std::string& cert_path);

// `bytes` bytes from the kernel's random generator (getrandom) as lowercase hex.
std::string random_hex(std::size_t bytes);

// True when the two strings are equal, in time that depends only on their lengths.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace dtrain::security::x509

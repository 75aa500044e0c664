#include "agent/security/secret.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "agent/security/x509.h"
#include "common/io/bounded_file.h"
#include "common/os/syscalls.h"

namespace dtrain::security {
namespace {

namespace fs = std::filesystem;

constexpr std::chrono::seconds kCaValidity{std::chrono::hours(24 * 3653)};
constexpr std::size_t kTokenBytes = 32;

std::string path_in(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

std::string init_hint(const std::string& dir) {
  return "run `dtrain secret init --dir " + dir + "` on one node and copy " + dir +
         " to every node (mode 0700)";
}

// Writes `content` to dir/name through a 0600 temporary file in the same directory and a rename, so the file
// appears whole or not at all.
void write_file_atomically(const std::string& dir, const char* name, const std::string& content) {
  std::string target = path_in(dir, name);
  std::string temp = path_in(dir, ".") + name + ".XXXXXX";
  std::vector<char> pattern(temp.begin(), temp.end());
  pattern.push_back('\0');
  int fd = ::mkstemp(pattern.data());  // creates the file with mode 0600
  if (fd < 0) throw SecurityError("cannot create a file in " + dir + ": " + errno_text() + "; is it writable?");
  temp = pattern.data();
  std::size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  bool ok = written == content.size() && ::fchmod(fd, 0600) == 0 && ::fsync(fd) == 0;
  std::string error = ok ? "" : errno_text();
  ::close(fd);
  if (ok && ::rename(temp.c_str(), target.c_str()) != 0) {
    ok = false;
    error = errno_text();
  }
  if (!ok) {
    ::unlink(temp.c_str());
    throw SecurityError("cannot write " + target + ": " + error);
  }
}

// A CA key, certificate or token is at most a few KB (an RSA-4096 key in PEM is 3.3 KB).
constexpr std::size_t kMaxSecretFileBytes = 64 * 1024;

std::string read_file(const std::string& path, const std::string& dir) {
  const Result<std::string> text = read_bounded_file(path, FileBound{kMaxSecretFileBytes});
  if (!text.ok()) {
    throw SecurityError(text.status.message() + ": the cluster secret in " + dir + " is incomplete; " +
                        init_hint(dir));
  }
  return text.value;
}

// Refuses a private file that its group or others may read or write, as ssh does for private keys.
void require_private(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return;  // read_file names the missing file
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw SecurityError("permissions " + std::string(mode) + " for " + path +
                        " are too open: other users could join this cluster and run commands on its nodes; "
                        "run `chmod 600 " + path + "`");
  }
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) {
    text.pop_back();
  }
  return text;
}

}  // namespace

std::string default_secret_dir() {
  if (const char* dir = std::getenv("DTRAIN_SECRET_DIR"); dir != nullptr && *dir != '\0') return dir;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    struct passwd* entry = ::getpwuid(::getuid());
    home = entry != nullptr ? entry->pw_dir : nullptr;
  }
  if (home == nullptr || *home == '\0') {
    throw SecurityError("no home directory to keep the cluster secret in: set DTRAIN_SECRET_DIR or pass --secret-dir");
  }
  return (fs::path(home) / ".dtrain").string();
}

void init_secret(const std::string& dir, bool force) {
  if (dir.empty()) throw SecurityError("dtrain secret init: the directory is empty; pass --dir DIR");
  std::vector<std::string> existing;
  for (const char* name : {kCaKeyFile, kCaCertFile, kTokenFile}) {
    std::error_code ignored;
    if (fs::exists(path_in(dir, name), ignored)) existing.push_back(path_in(dir, name));
  }
  if (!existing.empty() && !force) {
    std::string list;
    for (const std::string& path : existing) list += (list.empty() ? "" : ", ") + path;
    throw SecurityError("a cluster secret already exists (" + list +
                        "); replacing it locks out every node that has the old one. To replace it anyway, pass "
                        "--force and copy " + dir + " to every node again");
  }
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw SecurityError("cannot create " + dir + ": " + error.message());
  if (::chmod(dir.c_str(), 0700) != 0) {
    throw SecurityError("cannot set mode 0700 on " + dir + ": " + errno_text() + "; is it owned by you?");
  }

  x509::CertificateSpec spec;
  spec.common_name = "dtrain cluster CA";
  spec.is_ca = true;
  spec.not_before_offset = -std::chrono::seconds(3600);
  spec.validity = kCaValidity;
  Identity ca = x509::make_certificate(spec, nullptr);
  // The key first and the certificate after it: a reader racing a --force sees a mismatch, which load_secret names.
  write_file_atomically(dir, kCaKeyFile, ca.key_pem);
  write_file_atomically(dir, kCaCertFile, ca.cert_pem);
  write_file_atomically(dir, kTokenFile, x509::random_hex(kTokenBytes) + "\n");
}

ClusterSecret load_secret(const std::string& dir) {
  std::error_code error;
  if (dir.empty() || !fs::is_directory(dir, error)) {
    throw SecurityError("no cluster secret in " + (dir.empty() ? std::string("\"\"") : dir) + ": " + init_hint(dir));
  }
  ClusterSecret secret;
  secret.dir = dir;
  std::string key_path = path_in(dir, kCaKeyFile);
  std::string token_path = path_in(dir, kTokenFile);
  require_private(key_path);
  require_private(token_path);
  secret.ca_key_pem = read_file(key_path, dir);
  secret.ca_cert_pem = read_file(path_in(dir, kCaCertFile), dir);
  secret.token = trimmed(read_file(token_path, dir));
  if (secret.token.size() < 32) {
    throw SecurityError(token_path + " holds no token (at least 32 characters expected); " + init_hint(dir));
  }
  for (char c : secret.token) {
    if (c <= ' ' || c > '~') {
      throw SecurityError(token_path + " holds characters other than printable ASCII; " + init_hint(dir));
    }
  }
  x509::check_ca(secret.ca_key_pem, key_path, secret.ca_cert_pem, path_in(dir, kCaCertFile));
  return secret;
}

}  // namespace dtrain::security

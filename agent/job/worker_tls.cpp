#include "agent/job/worker_tls.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "agent/security/identity.h"

namespace dtrain::agent {
namespace {

// Writes `text` to a new or truncated file at `path` (0600, never through a symlink); false with errno set when
// it cannot.
bool write_private_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return written;
}

}  // namespace

WorkerTls::WorkerTls(std::string dir, security::ClusterSecret secret) : dir_(std::move(dir)), secret_(std::move(secret)) {
  const std::string ca = dir_ + "/ca.crt";
  if (!write_private_file(ca, secret_.ca_cert_pem)) throw std::runtime_error("cannot write " + ca);
  env_ = {{"DTRAIN_TLS_CA", ca}, {"DTRAIN_TLS_CERT", dir_ + "/worker.crt"}, {"DTRAIN_TLS_KEY", dir_ + "/worker.key"}};
}

WorkerTls::~WorkerTls() {
  std::error_code ignored;   // a destructor must not throw; the next agent to start sweeps a leftover (runtime_dir.h)
  std::filesystem::remove_all(dir_, ignored);
}

void WorkerTls::issue_for_job(const std::string& job_id, const std::string& host) {
  auto identity = security::issue_worker_identity(secret_, job_id, host);
  for (const auto& [name, text] :
       {std::pair{"worker.key", identity.key_pem}, std::pair{"worker.crt", identity.cert_pem}}) {
    const std::string path = dir_ + "/" + name;
    const std::string temp = path + ".new";
    if (!write_private_file(temp, text) || ::rename(temp.c_str(), path.c_str()) != 0) {
      throw std::runtime_error("cannot write the workers' certificate " + path + ": " + std::strerror(errno));
    }
  }
}

}  // namespace dtrain::agent

#include "agent/session/session_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>

#include "common/os/proc_stat.h"
#include "common/os/syscalls.h"

namespace dtrain::agent {
namespace {

// The directory must keep everyone but this user out: that, not the socket's own mode, is what stops other users
// (connect() needs search permission on every directory of the path).
void require_private_directory(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    throw std::runtime_error("--session-socket " + path + ": cannot use its directory " + dir + ": " + errno_text());
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    throw std::runtime_error("--session-socket " + path + ": its directory " + dir +
                             " must be a directory of this user with mode 0700 (a launcher creates one for its local "
                             "agents); other users could reach the socket otherwise");
  }
}

}  // namespace

Status check_session_peer(int fd, uid_t uid, const std::vector<pid_t>& pids) {
  ucred peer{};
  socklen_t length = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
    return {StatusCode::internal, "cannot read the peer's credentials (SO_PEERCRED): " + errno_text()};
  }
  if (peer.uid != uid || std::find(pids.begin(), pids.end(), peer.pid) == pids.end()) {
    const std::string who = "pid " + std::to_string(peer.pid) + " (uid " + std::to_string(peer.uid) + ")";
    return {StatusCode::permission_denied, "a connection from " + who +
                                               " is not from the launcher that started this agent (uid " +
                                               std::to_string(uid) + ", one of this agent's ancestor processes)"};
  }
  return {};
}

std::vector<pid_t> ancestor_pids() {
  std::vector<pid_t> pids;
  pid_t pid = ::getppid();
  // Bounded: a process tree deeper than this is not one a launcher made.
  while (pid > 1 && pids.size() < 64) {
    pids.push_back(pid);
    const Result<ProcStat> stat = read_proc_stat(pid);
    if (!stat.ok()) break;
    pid = stat.value.ppid;
  }
  return pids;
}

SessionSocket::SessionSocket(std::string path, grpc::Server& server) : path_(std::move(path)), server_(server) {
  require_private_directory(path_);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof address.sun_path) {
    throw std::runtime_error("--session-socket " + path_ + ": the path is longer than a Unix socket allows (" +
                             std::to_string(sizeof address.sun_path - 1) + " bytes)");
  }
  std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (listen_fd_ < 0 || wake_fd_ < 0) throw std::runtime_error("cannot create a Unix socket: " + errno_text());
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::chmod(path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 16) != 0) {
    std::string why = errno_text();
    ::close(listen_fd_);
    ::close(wake_fd_);
    throw std::runtime_error("--session-socket " + path_ + ": cannot listen there: " + why);
  }
  thread_ = std::thread([this] { accept_loop(); });
}

SessionSocket::~SessionSocket() {
  const std::uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) spdlog::warn("cannot wake the session socket's accept loop");
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

void SessionSocket::accept_loop() {
  const uid_t uid = ::geteuid();
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    // No timeout needed: the destructor always wakes this poll through wake_fd_.
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("session socket {}: poll failed: {}", path_, errno_text());
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    // gRPC's endpoint expects a non-blocking descriptor.
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    // Ancestors are read at every connection: once the launcher died, it is no longer among them.
    if (Status refused = check_session_peer(fd, uid, ancestor_pids()); !refused.ok()) {
      spdlog::warn("session socket {}: refused: {}", path_, refused.message());
      ::close(fd);
      continue;
    }
    grpc::AddInsecureChannelFromFd(&server_, fd);
  }
}

}  // namespace dtrain::agent

#include "cli/controller/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace dtrain::controller {
namespace {

using Clock = std::chrono::steady_clock;

// A snapshot is a few hundred bytes per rank; 65,536 ranks stay far below this. More is not a snapshot.
constexpr std::size_t kMaxSnapshotBytes = 256u << 20;

std::string errno_text() { return std::strerror(errno); }

sockaddr_un address_in(int dir_fd, const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

}  // namespace

Result<std::unique_ptr<ControlSocket>> ControlSocket::listen(const std::string& dir) {
  const auto fail = [&](const std::string& what) -> Result<std::unique_ptr<ControlSocket>> {
    return {{StatusCode::internal, "cannot serve the control socket in " + dir + " (" + what + "): " + errno_text() +
                                       "; `dtrain status` will read the snapshot file instead"}};
  };
  Fd dir_fd{::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd < 0) return fail("open");
  Fd sock{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (sock.fd < 0) return fail("socket");
  const std::string temp = "." + std::string(kControlSocketName) + "." + std::to_string(::getpid());
  ::unlinkat(dir_fd.fd, temp.c_str(), 0);
  const sockaddr_un a = address_in(dir_fd.fd, temp);
  if (::bind(sock.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return fail("bind");
  // Owner only before the name a client looks for exists.
  if (::fchmodat(dir_fd.fd, temp.c_str(), 0600, 0) != 0 ||
      ::renameat(dir_fd.fd, temp.c_str(), dir_fd.fd, kControlSocketName) != 0) {
    ::unlinkat(dir_fd.fd, temp.c_str(), 0);
    return fail("chmod and rename");
  }
  // A few pending clients; more get ECONNREFUSED/EAGAIN and try again.
  constexpr int kBacklog = 16;
  int stop[2];
  if (::listen(sock.fd, kBacklog) != 0 || ::pipe2(stop, O_CLOEXEC) != 0) {
    ::unlinkat(dir_fd.fd, kControlSocketName, 0);
    return fail("listen");
  }
  std::unique_ptr<ControlSocket> out(new ControlSocket(dir_fd.release(), sock.release(), stop[0], stop[1]));
  out->thread_ = std::thread([s = out.get()] { s->serve(); });
  return {{}, std::move(out)};
}

ControlSocket::ControlSocket(int dir_fd, int listen_fd, int stop_read, int stop_write)
    : dir_fd_(dir_fd), listen_fd_(listen_fd), stop_read_(stop_read), stop_write_(stop_write),
      snapshot_(std::make_shared<const std::string>("{}")) {}

ControlSocket::~ControlSocket() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  published_.notify_all();
  const char byte = 0;
  while (::write(stop_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  ::unlinkat(dir_fd_, kControlSocketName, 0);
  for (int fd : {listen_fd_, stop_read_, stop_write_, dir_fd_}) ::close(fd);
}

void ControlSocket::publish(std::string snapshot) {
  auto next = std::make_shared<const std::string>(std::move(snapshot));
  {
    std::lock_guard lock(mutex_);
    snapshot_ = std::move(next);
    ++generation_;
    wanted_.store(false, std::memory_order_relaxed);
  }
  published_.notify_all();
}

std::shared_ptr<const std::string> ControlSocket::fresh_snapshot() {
  std::unique_lock lock(mutex_);
  const std::uint64_t seen = generation_;
  wanted_.store(true, std::memory_order_relaxed);
  published_.wait_for(lock, kFreshWait, [&] { return generation_ != seen || stopping_; });
  return snapshot_;
}

void ControlSocket::serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_read_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) continue;
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.uid == ::geteuid()) {
      answer(client, *fresh_snapshot());
    }
    ::close(client);
  }
}

void ControlSocket::answer(int client, const std::string& snapshot) {
  const auto deadline = Clock::now() + kClientBudget;
  std::size_t sent = 0;
  while (sent < snapshot.size()) {
    const ssize_t n = ::send(client, snapshot.data() + sent, snapshot.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return;
    pollfd fds[2] = {{client, POLLOUT, 0}, {stop_read_, POLLIN, 0}};
    if (::poll(fds, 2, ms_left(deadline)) <= 0 || fds[1].revents != 0) return;
  }
}

Result<std::string> read_control_socket(const std::string& dir, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Fd dir_fd{::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd < 0) return {{StatusCode::not_found, "cannot open " + dir + ": " + errno_text()}};
  Fd sock{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (sock.fd < 0) return {{StatusCode::internal, "socket: " + errno_text()}};
  const sockaddr_un a = address_in(dir_fd.fd, kControlSocketName);
  const std::string where = dir + "/" + kControlSocketName;
  if (::connect(sock.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    const StatusCode code = errno == ENOENT ? StatusCode::not_found : StatusCode::unavailable;
    return {{code, "cannot connect to " + where + ": " + errno_text()}};
  }
  std::string out;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::recv(sock.fd, buffer, sizeof buffer, 0);
    if (n == 0) return {{}, std::move(out)};
    if (n > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
      if (out.size() > kMaxSnapshotBytes) {
        return {{StatusCode::resource_exhausted, where + " sent more than a snapshot can be"}};
      }
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return {{StatusCode::unavailable, "reading " + where + ": " + errno_text()}};
    pollfd fd{sock.fd, POLLIN, 0};
    if (::poll(&fd, 1, ms_left(deadline)) == 0) {
      return {{StatusCode::deadline_exceeded, "the launcher did not answer on " + where + " within " +
                                                  std::to_string(timeout.count()) + " ms"}};
    }
  }
}

}  // namespace dtrain::controller

#include "cli/controller/observe/control_socket.h"
#include "common/os/syscalls.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace dtrain::controller {
namespace {

using Clock = std::chrono::steady_clock;

// A snapshot is a few hundred bytes per rank; 65,536 ranks stay far below this. More is not a snapshot.
constexpr std::size_t kMaxSnapshotBytes = 256u << 20;

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
  void reset(int next) {
    if (fd >= 0) ::close(fd);
    fd = next;
  }
};

// Who owns the control socket in `dir_fd`: "alice (uid 1000)", and the name `sudo -u` takes ("alice", or "#1000"
// for a uid without a name).
struct Owner {
  std::string text = "its owner (unknown)";
  std::string user = "OWNER";
};

Owner owner_of(int dir_fd) {
  struct stat st{};
  if (::fstatat(dir_fd, kControlSocketName, &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  const std::string uid = std::to_string(st.st_uid);
  if (::getpwuid_r(st.st_uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return {"uid " + uid, "#" + uid};
  }
  return {std::string(found->pw_name) + " (uid " + uid + ")", found->pw_name};
}

// What the refused user can do instead.
std::string as_owner_hint(const Owner& owner, const std::string& dir) {
  return "run `dtrain status` as that user, e.g. `sudo -u " + owner.user + " dtrain status " + dir + "`";
}

// Connects to the control socket in `dir_fd` by `deadline`. A full queue (EAGAIN) means the launcher is there but
// behind: tried again every 20 ms until the deadline. Every failure says what it means (read_control_socket).
Status connect_within(int dir_fd, const std::string& dir, const std::string& where, Clock::time_point deadline,
                      Fd& sock) {
  const sockaddr_un a = address_in(dir_fd, kControlSocketName);
  for (;;) {
    sock.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (sock.fd < 0) return {StatusCode::internal, "socket: " + errno_text()};
    if (::connect(sock.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return {};
    const int error = errno;
    if (error == EAGAIN && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const std::string why = "cannot connect to " + where + ": " + std::strerror(error);
    switch (error) {
      case ENOENT: return {StatusCode::not_found, why + " (the launcher has ended, or never started)"};
      case ECONNREFUSED: return {StatusCode::unavailable, why + " (nobody listens: the launcher is gone)"};
      case EACCES:
      case EPERM: {
        const Owner owner = owner_of(dir_fd);
        return {StatusCode::permission_denied, why + ": the job belongs to " + owner.text +
                                                   ", and only its user may read its live status; " +
                                                   as_owner_hint(owner, dir)};
      }
      case EAGAIN:
        return {StatusCode::deadline_exceeded, why + " (the launcher is busy: its queue of waiting clients stayed "
                                               "full)"};
      default: return {StatusCode::unavailable, why};
    }
  }
}

}  // namespace

Result<std::unique_ptr<ControlSocket>> ControlSocket::listen(const std::string& dir) {
  // `cause` is read before any clean-up, which may set errno again.
  const auto fail = [&](const std::string& what, const std::string& cause) -> Result<std::unique_ptr<ControlSocket>> {
    return {{StatusCode::internal, "cannot serve the control socket in " + dir + " (" + what + "): " + cause +
                                       "; `dtrain status` will read the snapshot file instead"}};
  };
  Fd dir_fd{::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd < 0) return fail("open", errno_text());
  Fd sock{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (sock.fd < 0) return fail("socket", errno_text());
  const std::string temp = "." + std::string(kControlSocketName) + "." + std::to_string(::getpid());
  ::unlinkat(dir_fd.fd, temp.c_str(), 0);
  const sockaddr_un a = address_in(dir_fd.fd, temp);
  if (::bind(sock.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return fail("bind", errno_text());
  // Owner only before the name a client looks for exists.
  if (::fchmodat(dir_fd.fd, temp.c_str(), 0600, 0) != 0 ||
      ::renameat(dir_fd.fd, temp.c_str(), dir_fd.fd, kControlSocketName) != 0) {
    const std::string cause = errno_text();
    ::unlinkat(dir_fd.fd, temp.c_str(), 0);
    return fail("chmod and rename", cause);
  }
  int stop[2];
  if (::listen(sock.fd, kBacklog) != 0 || ::pipe2(stop, O_CLOEXEC) != 0) {
    const std::string cause = errno_text();
    ::unlinkat(dir_fd.fd, kControlSocketName, 0);
    return fail("listen", cause);
  }
  auto snapshot = OnDemandText::create("{}");
  if (!snapshot.ok()) {
    ::unlinkat(dir_fd.fd, kControlSocketName, 0);
    for (int fd : stop) ::close(fd);
    return fail("its wake-up", snapshot.status.message());
  }
  std::unique_ptr<ControlSocket> out(
      new ControlSocket(dir_fd.release(), sock.release(), stop[0], stop[1], std::move(snapshot.value)));
  out->thread_ = std::thread([s = out.get()] { s->serve(); });
  return {{}, std::move(out)};
}

ControlSocket::ControlSocket(int dir_fd, int listen_fd, int stop_read, int stop_write,
                             std::unique_ptr<OnDemandText> snapshot)
    : dir_fd_(dir_fd), listen_fd_(listen_fd), stop_read_(stop_read), stop_write_(stop_write),
      snapshot_(std::move(snapshot)) {}

ControlSocket::~ControlSocket() {
  const char byte = 0;
  while (::write(stop_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  ::unlinkat(dir_fd_, kControlSocketName, 0);
  for (int fd : {listen_fd_, stop_read_, stop_write_, dir_fd_}) ::close(fd);
}

// One connected client: waiting for a snapshot (none yet), then being sent it until `deadline`.
struct ControlSocket::Client {
  int fd = -1;
  Clock::time_point connected;
  std::uint64_t asked = 0;                        // OnDemandText::ask's answer: it wants a later snapshot
  std::shared_ptr<const std::string> snapshot;    // set once it has one to get
  std::size_t sent = 0;
  Clock::time_point deadline;                     // kFreshWait after connecting, then kClientBudget past its last read

  // Writes what the socket takes now; true once the client is done with (all sent, gone, or out of time). A client
  // that reads keeps its slot however slowly it reads (a loaded machine); one that stops is cut off kClientBudget
  // after the last bytes it took.
  bool send_some(Clock::time_point now) {
    while (sent < snapshot->size()) {
      const ssize_t n = ::send(fd, snapshot->data() + sent, snapshot->size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        deadline = now + kClientBudget;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return n == 0 || errno != EAGAIN || now >= deadline;
      }
    }
    return true;
  }
};

void ControlSocket::accept_clients(std::vector<Client>& clients) {
  while (clients.size() < kMaxClients) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: the queue is empty (or a client left before it was accepted)
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != ::geteuid()) {
      ::close(fd);
      continue;
    }
    const auto now = Clock::now();
    clients.push_back({fd, now, snapshot_->ask(), nullptr, 0, now + kFreshWait});
  }
}

void ControlSocket::hand_out_snapshots(std::vector<Client>& clients) {
  const auto now = Clock::now();
  bool waiting = false;
  for (auto& c : clients) {
    if (c.snapshot) continue;
    c.snapshot = snapshot_->for_reader(c.asked, now >= c.deadline);
    if (c.snapshot) {
      c.deadline = now + kClientBudget;
    } else {
      waiting = true;
    }
  }
  // A publish that answered earlier clients cleared the wish; later ones still wait for theirs.
  if (waiting) snapshot_->ask_again();
}

void ControlSocket::serve() {
  std::vector<Client> clients;
  std::vector<pollfd> fds;
  for (;;) {
    // stop, wake, then the listening socket while there is room, then every client with a snapshot to send.
    fds.assign({{stop_read_, POLLIN, 0}, {snapshot_->wake_fd(), POLLIN, 0}, {-1, POLLIN, 0}});
    if (clients.size() < kMaxClients) fds[2].fd = listen_fd_;
    auto next = Clock::time_point::max();
    for (const auto& c : clients) {
      fds.push_back({c.snapshot ? c.fd : -1, POLLOUT, 0});
      next = std::min(next, c.deadline);
    }
    const int timeout = next == Clock::time_point::max() ? -1 : ms_left(next);
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    if (fds[1].revents != 0) snapshot_->clear_wake();
    if (fds[2].revents != 0) accept_clients(clients);
    hand_out_snapshots(clients);
    const auto now = Clock::now();
    std::erase_if(clients, [&](Client& c) {
      const bool done = c.snapshot ? c.send_some(now) : false;
      if (done) ::close(c.fd);
      return done;
    });
  }
  for (const auto& c : clients) ::close(c.fd);
}

Result<std::string> read_control_socket(const std::string& dir, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Fd dir_fd{::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd < 0) return {{StatusCode::not_found, "cannot open " + dir + ": " + errno_text()}};
  const std::string where = dir + "/" + kControlSocketName;
  Fd sock;
  if (Status connected = connect_within(dir_fd.fd, dir, where, deadline, sock); !connected.ok()) return {connected};
  std::string out;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::recv(sock.fd, buffer, sizeof buffer, 0);
    if (n == 0 && out.empty()) {
      // A launcher closes a client of another user without a word (root is one: SO_PEERCRED shows uid 0).
      const Owner owner = owner_of(dir_fd.fd);
      return {{StatusCode::permission_denied, "the launcher on " + where + " closed the connection without an "
                                              "answer: it answers only its own user, " + owner.text + "; " +
                                              as_owner_hint(owner, dir)}};
    }
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
      return {{StatusCode::deadline_exceeded, "the launcher is busy: it did not answer on " + where + " within " +
                                                  std::to_string(timeout.count()) + " ms"}};
    }
  }
}

}  // namespace dtrain::controller

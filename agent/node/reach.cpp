#include "agent/node/reach.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

namespace dtrain::node {
namespace {

using Clock = std::chrono::steady_clock;

Reach reach_one(const std::string& address, std::chrono::milliseconds timeout) {
  Reach out;
  out.address = address;
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    out.error = "not host:port";
    return out;
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), address.c_str() + colon + 1, &hints, &found); rc != 0 || !found) {
    out.error = "cannot resolve " + host + ": " + gai_strerror(rc);
    return out;
  }
  const auto started = Clock::now();
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    out.error = std::string("socket: ") + std::strerror(errno);
    freeaddrinfo(found);
    return out;
  }
  int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc == 0) {
      out.error = "timed out after " + std::to_string(timeout.count()) + " ms (dropped by a firewall, or no route)";
    } else if (rc > 0) {
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == 0) out.ok = true;
      else out.error = std::strerror(error);
    } else {
      out.error = std::string("poll: ") + std::strerror(errno);
    }
  } else if (rc == 0) {
    out.ok = true;
  } else {
    out.error = std::strerror(errno);
  }
  out.connect_ms = static_cast<unsigned>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
  ::close(fd);
  return out;
}

}  // namespace

std::vector<Reach> reach_all(const std::vector<std::string>& addresses, std::chrono::milliseconds timeout) {
  std::vector<Reach> out(addresses.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = reach_one(addresses[i], timeout); });
  }
  for (auto& t : threads) t.join();
  return out;
}

OpenPort::OpenPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 64) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    ::close(fd_);
    throw std::system_error(error, std::generic_category(), "listening on a free port");
  }
  port_ = ntohs(addr.sin_port);
}

OpenPort::~OpenPort() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace dtrain::node

#include "cli/controller/observe/metrics_server.h"
#include "common/os/syscalls.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

namespace dtrain::controller {
namespace {

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kErrorContentType = "text/plain; charset=utf-8";
// Pending connections the kernel holds while the thread is busy: a few scrapers at once.
constexpr int kBacklog = 16;
// Connections accepted per turn of the loop: a flood of connects cannot keep the thread from the open ones.
constexpr int kAcceptsPerTurn = 16;

// "host" and "port" of host:port or [ipv6]:port (checked by the spec).
std::pair<std::string, std::string> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, colon == std::string::npos ? "" : address.substr(colon + 1)};
}

std::string numeric_address(int fd) {
  sockaddr_storage a{};
  socklen_t length = sizeof a;
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&a), length, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return a.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

// A listening socket on the first of the host's addresses that binds; the error names the address and the cause.
Result<int> bind_listener(const std::string& address) {
  const auto fail = [&](const std::string& what) -> Result<int> {
    return {{StatusCode::unavailable, "cannot serve metrics on " + address + " (observe.metrics_addr): " + what +
                                          "; the job runs without /metrics (choose a free port, or port 0 for any)"}};
  };
  const auto [host, port] = split_address(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return fail("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  std::string why = "no address";
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      why = "socket: " + errno_text();
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kBacklog) != 0) {
      why = "bind: " + errno_text();
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return fail(why);
  return {{}, fd};
}

enum class Verdict { metrics, bad_request, not_found, method_not_allowed };

// The request line, once its '\n' arrived: "GET /metrics HTTP/1.1". Query strings are ignored (Prometheus sends
// none unless configured to).
std::optional<Verdict> judge_request_line(std::string_view request) {
  const auto end = request.find('\n');
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view line = request.substr(0, end);
  if (line.ends_with('\r')) line.remove_suffix(1);
  const auto first = line.find(' ');
  const auto second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) {
    return Verdict::bad_request;
  }
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  const bool token = !method.empty() && std::all_of(method.begin(), method.end(), [](char c) {
    return c >= 'A' && c <= 'Z';
  });
  if (!token || !target.starts_with('/') || !version.starts_with("HTTP/1.")) return Verdict::bad_request;
  if (method != "GET") return Verdict::method_not_allowed;
  return target.substr(0, target.find('?')) == "/metrics" ? Verdict::metrics : Verdict::not_found;
}

bool head_complete(std::string_view request) {
  return request.find("\r\n\r\n") != std::string_view::npos || request.find("\n\n") != std::string_view::npos;
}

std::string response_head(const char* status, const char* type, std::size_t length, const char* extra = "") {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
         std::to_string(length) + "\r\n" + extra + "Connection: close\r\n\r\n";
}

// What a connection over MetricsServerOptions::max_connections gets: small enough for any socket buffer, so one
// non-blocking send either delivers it or the client never sees it.
const std::string& busy_response() {
  static const std::string text = response_head("503 Service Unavailable", kErrorContentType, 0);
  return text;
}

// Ends a connection that ran past its deadline with a reset: a plain close would leave the kernel delivering the
// rest of a large answer to a client that does not read, for as long as it keeps its window open.
void abort_connection(int fd) {
  const linger now{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
  ::close(fd);
}

int ms_until(MetricsServer::Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - MetricsServer::Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 60000)) + 1;
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::listen(const std::string& address,
                                                             MetricsServerOptions options) {
  Result<int> fd = bind_listener(address);
  if (!fd.ok()) return {fd.status};
  int stop[2];
  if (::pipe2(stop, O_CLOEXEC) != 0) {
    ::close(fd.value);
    return {{StatusCode::internal, "cannot serve metrics on " + address + ": pipe: " + errno_text()}};
  }
  auto text = OnDemandText::create("");
  if (!text.ok()) {
    for (int f : {fd.value, stop[0], stop[1]}) ::close(f);
    return {{StatusCode::internal, "cannot serve metrics on " + address + ": " + text.status.message()}};
  }
  std::unique_ptr<MetricsServer> out(
      new MetricsServer(fd.value, stop[0], stop[1], std::move(text.value), numeric_address(fd.value), options));
  out->thread_ = std::thread([s = out.get()] { s->serve(); });
  return {{}, std::move(out)};
}

MetricsServer::MetricsServer(int listen_fd, int stop_read, int stop_write, std::unique_ptr<OnDemandText> text,
                             std::string address, MetricsServerOptions options)
    : listen_fd_(listen_fd), stop_read_(stop_read), stop_write_(stop_write), text_(std::move(text)),
      address_(std::move(address)), options_(options) {}

MetricsServer::~MetricsServer() {
  const char byte = 0;
  while (::write(stop_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  for (const auto& c : connections_) abort_connection(c.fd);
  for (int fd : {listen_fd_, stop_read_, stop_write_}) ::close(fd);
}

void MetricsServer::serve() {
  std::vector<pollfd> fds;
  while (true) {
    fds.assign({{stop_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}, {text_->wake_fd(), POLLIN, 0}});
    Clock::time_point wake = Clock::now() + std::chrono::hours(1);
    for (const auto& c : connections_) {
      // A waiting scrape is not read from (its request is whole); a hang-up still shows.
      fds.push_back({c.fd, static_cast<short>(c.waiting ? 0 : c.answered() ? POLLOUT : POLLIN), 0});
      wake = std::min(wake, c.waiting ? std::min(c.deadline, c.wait_until) : c.deadline);
    }
    if (::poll(fds.data(), fds.size(), ms_until(wake)) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    if (fds[2].revents != 0) text_->clear_wake();
    const auto now = Clock::now();
    std::vector<Connection> open;
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      Connection& c = connections_[i];
      const short events = fds[i + 3].revents;
      if (now >= c.deadline || (c.waiting && (events & (POLLHUP | POLLERR)) != 0)) {
        abort_connection(c.fd);
      } else if (c.waiting) {
        OnDemandText::Text text = text_->for_reader(c.asked, now >= c.wait_until);
        if (!text) {
          open.push_back(std::move(c));
        } else if (answer_metrics(c, std::move(text))) {
          open.push_back(std::move(c));
        } else {
          ::close(c.fd);
        }
      } else if (events == 0 || (c.answered() ? write_response(c) : read_request(c))) {
        open.push_back(std::move(c));
      } else {
        ::close(c.fd);
      }
    }
    connections_ = std::move(open);
    if (fds[1].revents != 0) accept_new();
  }
}

void MetricsServer::accept_new() {
  for (int n = 0; n < kAcceptsPerTurn; ++n) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (connections_.size() >= options_.max_connections) {
      const std::string& busy = busy_response();
      [[maybe_unused]] const ssize_t sent = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    Connection c;
    c.fd = fd;
    c.deadline = Clock::now() + options_.connection_deadline;
    connections_.push_back(std::move(c));
  }
}

bool MetricsServer::read_request(Connection& c) {
  char buffer[4096];
  while (true) {
    const std::size_t room = options_.max_request_bytes + 1 - c.request.size();
    const ssize_t n = ::recv(c.fd, buffer, std::min(room, sizeof buffer), 0);
    if (n == 0) return false;   // the client left before its request was whole
    if (n < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
    c.request.append(buffer, static_cast<std::size_t>(n));
    const auto verdict = judge_request_line(c.request);
    const bool too_big = c.request.size() > options_.max_request_bytes;
    if (verdict == Verdict::bad_request || head_complete(c.request) || too_big) {
      answer(c);
      return c.waiting || write_response(c);
    }
  }
}

void MetricsServer::answer(Connection& c) {
  const auto verdict = judge_request_line(c.request);
  const auto text = [](std::string s) { return std::make_shared<const std::string>(std::move(s)); };
  if (verdict != Verdict::bad_request && !head_complete(c.request)) {
    c.body = text("request head over " + std::to_string(options_.max_request_bytes) + " bytes\n");
    c.head = response_head("431 Request Header Fields Too Large", kErrorContentType, c.body->size());
  } else if (verdict == Verdict::metrics) {
    if (text_->younger_than(kFresh)) {
      give_text(c, text_->latest());
    } else {
      c.waiting = true;
      // (Never more than half the connection's time: the rest is for sending the answer.)
      c.wait_until = Clock::now() + std::min<Clock::duration>(kFreshWait, options_.connection_deadline / 2);
      c.asked = text_->ask();
    }
  } else if (verdict == Verdict::method_not_allowed) {
    c.body = text("only GET is served\n");
    c.head = response_head("405 Method Not Allowed", kErrorContentType, c.body->size(), "Allow: GET\r\n");
  } else if (verdict == Verdict::not_found) {
    c.body = text("not found: the metrics are at /metrics\n");
    c.head = response_head("404 Not Found", kErrorContentType, c.body->size());
  } else {
    c.body = text("not an HTTP/1.x request\n");
    c.head = response_head("400 Bad Request", kErrorContentType, c.body->size());
  }
  c.request.clear();
}

void MetricsServer::give_text(Connection& c, OnDemandText::Text text) {
  c.body = std::move(text);
  c.head = response_head("200 OK", kMetricsContentType, c.body->size());
}

bool MetricsServer::answer_metrics(Connection& c, OnDemandText::Text text) {
  c.waiting = false;
  give_text(c, std::move(text));
  return write_response(c);
}

bool MetricsServer::write_response(Connection& c) {
  const std::size_t total = c.head.size() + c.body->size();
  while (c.sent < total) {
    const bool in_head = c.sent < c.head.size();
    const char* data = in_head ? c.head.data() + c.sent : c.body->data() + (c.sent - c.head.size());
    const std::size_t size = in_head ? c.head.size() - c.sent : total - c.sent;
    const ssize_t n = ::send(c.fd, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);   // the rest when the client reads
    }
  }
  // All of it: end the stream so the client sees the end of the response, then close.
  ::shutdown(c.fd, SHUT_WR);
  return false;
}

}  // namespace dtrain::controller

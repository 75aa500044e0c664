#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cli/controller/observe/metrics_server.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int port_of(const MetricsServer& server) {
  const std::string& a = server.address();
  return std::stoi(a.substr(a.rfind(':') + 1));
}

// A connected TCP socket to 127.0.0.1:port, blocking, with receive and send timeouts so that no test can hang.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  return fd;
}

void send_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;   // the server may close a hostile client in the middle
    done += static_cast<std::size_t>(n);
  }
}

// Everything until the server closes (or 5 s pass).
std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return out;
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

std::string request_reply(int port, const std::string& request) {
  const int fd = connect_to(port);
  send_all(fd, request);
  std::string out = read_all(fd);
  ::close(fd);
  return out;
}

std::string scrape(int port) { return request_reply(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); }

std::string body_of(const std::string& response) {
  const auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

// True when the server closed `fd` (EOF or reset) within `timeout`.
bool closed_within(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char buffer[65536];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n <= 0) return true;
  }
  return false;
}

MetricsServerOptions quick() {
  MetricsServerOptions o;
  o.connection_deadline = 500ms;
  o.max_connections = 8;
  return o;
}

}  // namespace

TEST_CASE("GET /metrics gets the published text with the 0.0.4 content type; port 0 binds a free port") {
  auto server = MetricsServer::listen("127.0.0.1:0");
  REQUIRE(server.ok());
  const int port = port_of(*server.value);
  CHECK(port > 0);
  CHECK(server.value->address() == "127.0.0.1:" + std::to_string(port));
  const std::string text = "# HELP m h\n# TYPE m gauge\nm 1\n";
  server.value->publish(text);
  const std::string response = scrape(port);
  CHECK(response.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(response.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(response.find("\r\nContent-Length: " + std::to_string(text.size()) + "\r\n") != std::string::npos);
  CHECK(response.find("\r\nConnection: close\r\n") != std::string::npos);
  CHECK(body_of(response) == text);
  // A query string and bare \n line ends (as from a hand-typed request) are fine.
  CHECK(body_of(request_reply(port, "GET /metrics?x=1 HTTP/1.0\n\n")) == text);
  server.value->publish("m 2\n");
  CHECK(body_of(scrape(port)) == "m 2\n");
}

TEST_CASE("other paths get 404, other methods 405, garbage 400, a huge head 431") {
  auto server = MetricsServer::listen("127.0.0.1:0", quick());
  REQUIRE(server.ok());
  const int port = port_of(*server.value);
  CHECK(request_reply(port, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 Not Found\r\n"));
  CHECK(request_reply(port, "GET /metricsx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
  const std::string post = request_reply(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  CHECK(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
  CHECK(post.find("\r\nAllow: GET\r\n") != std::string::npos);
  CHECK(request_reply(port, "HEAD /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
  // Garbage is answered as soon as its first line is whole, without waiting for a blank line that never comes.
  CHECK(request_reply(port, std::string("\x16\x03\x01\x02\x00\x01 binary\r\n", 17)).starts_with("HTTP/1.1 400 "));
  CHECK(request_reply(port, "GET /metrics\r\n").starts_with("HTTP/1.1 400 "));
  CHECK(request_reply(port, "get /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400 "));
  CHECK(request_reply(port, "GET /metrics SPDY/3\r\n\r\n").starts_with("HTTP/1.1 400 "));
  CHECK(request_reply(port, "\r\n\r\n").starts_with("HTTP/1.1 400 "));
  // A head over 8 KiB, whether the request line is whole or not: 431, and the connection ends.
  CHECK(request_reply(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a')).starts_with("HTTP/1.1 431 "));
  CHECK(request_reply(port, "GET /" + std::string(1 << 20, 'a')).starts_with("HTTP/1.1 431 "));
  // Still serving.
  CHECK(scrape(port).starts_with("HTTP/1.1 200 "));
}

TEST_CASE("slowloris: a client that sends part of a request, or nothing, is closed at the deadline and blocks no one") {
  auto server = MetricsServer::listen("127.0.0.1:0", quick());
  REQUIRE(server.ok());
  const int port = port_of(*server.value);
  const int silent = connect_to(port);
  const int partial = connect_to(port);
  send_all(partial, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  // Served while both hang on.
  const auto before = Clock::now();
  CHECK(scrape(port).starts_with("HTTP/1.1 200 "));
  CHECK(Clock::now() - before < 400ms);
  CHECK(closed_within(silent, 2s));
  CHECK(closed_within(partial, 2s));
  ::close(silent);
  ::close(partial);
}

TEST_CASE("a client that never reads a large answer is cut off at the deadline; others are served meanwhile") {
  auto server = MetricsServer::listen("127.0.0.1:0", quick());
  REQUIRE(server.ok());
  const int port = port_of(*server.value);
  server.value->publish(std::string(64u << 20, 'x'));
  const int stuck = connect_to(port);
  const int small_buffer = 4096;
  ::setsockopt(stuck, SOL_SOCKET, SO_RCVBUF, &small_buffer, sizeof small_buffer);
  send_all(stuck, "GET /metrics HTTP/1.1\r\n\r\n");
  std::this_thread::sleep_for(50ms);
  server.value->publish("m 1\n");
  CHECK(body_of(scrape(port)) == "m 1\n");
  // After the deadline the server has reset it: reading now ends at once, well short of 64 MB.
  std::this_thread::sleep_for(800ms);
  const auto before = Clock::now();
  CHECK(read_all(stuck).size() < (64u << 20));
  CHECK(Clock::now() - before < 1s);
  ::close(stuck);
}

TEST_CASE("many connections: past max_connections the rest get 503 at once; serving resumes when they go") {
  // Long enough that the idle ones outlast the extras, which the kernel may hold in the backlog for a while.
  MetricsServerOptions options = quick();
  options.connection_deadline = 2s;
  auto server = MetricsServer::listen("127.0.0.1:0", options);
  REQUIRE(server.ok());
  const int port = port_of(*server.value);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(connect_to(port));
  std::this_thread::sleep_for(100ms);   // the server has accepted them
  std::vector<int> extra;
  for (int i = 0; i < 30; ++i) extra.push_back(connect_to(port));
  for (int fd : extra) {
    CHECK(read_all(fd).starts_with("HTTP/1.1 503 "));
    ::close(fd);
  }
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(100ms);
  CHECK(scrape(port).starts_with("HTTP/1.1 200 "));
  // And the deadline frees a slot without the client's help.
  for (int i = 0; i < 8; ++i) idle[static_cast<std::size_t>(i)] = connect_to(port);
  std::this_thread::sleep_for(2500ms);
  CHECK(scrape(port).starts_with("HTTP/1.1 200 "));
  for (int fd : idle) ::close(fd);
}

TEST_CASE("a port in use and a host that does not resolve are errors naming the address and the key") {
  auto first = MetricsServer::listen("127.0.0.1:0");
  REQUIRE(first.ok());
  auto second = MetricsServer::listen(first.value->address());
  REQUIRE_FALSE(second.ok());
  CHECK(second.status.message().find(first.value->address() + " (observe.metrics_addr)") != std::string::npos);
  CHECK(second.status.message().find("in use") != std::string::npos);
  auto nowhere = MetricsServer::listen("no-such-host.invalid:0");
  REQUIRE_FALSE(nowhere.ok());
  CHECK(nowhere.status.message().find("cannot resolve 'no-such-host.invalid'") != std::string::npos);
}

// Whether this host can bind IPv6 loopback at all (a container may have IPv6 off): asked of the kernel directly, so
// that the server failing where the kernel would have let it bind is a failure, not a skip.
bool host_has_ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

TEST_CASE("IPv6 loopback is written in brackets") {
  if (!host_has_ipv6_loopback()) {
    MESSAGE("SKIPPED: this host cannot bind [::1] (IPv6 is off)");
    return;
  }
  auto server = MetricsServer::listen("[::1]:0", quick());
  REQUIRE_MESSAGE(server.ok(), server.status.message());
  CHECK(server.value->address().starts_with("[::1]:"));
  CHECK(port_of(*server.value) > 0);
}

TEST_CASE("stopping the server with a connection open returns at once and closes it") {
  auto server = MetricsServer::listen("127.0.0.1:0");   // the default 10 s deadline
  REQUIRE(server.ok());
  const int fd = connect_to(port_of(*server.value));
  std::this_thread::sleep_for(50ms);
  const auto before = Clock::now();
  server.value.reset();
  CHECK(Clock::now() - before < 1s);
  CHECK(closed_within(fd, 1s));
  ::close(fd);
}

TEST_CASE("metrics are made on demand: a scrape of an old text waits for the launcher's fresh one") {
  auto server = MetricsServer::listen("127.0.0.1:0");
  REQUIRE(server.ok());
  MetricsServer& s = *server.value;
  const int port = port_of(s);
  CHECK_FALSE(s.wanted());
  // Nothing published yet: the scrape asks for a text and gets the one published while it waits.
  const int fd = connect_to(port);
  send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto asked = Clock::now();
  while (!s.wanted() && Clock::now() - asked < 3s) std::this_thread::sleep_for(5ms);
  REQUIRE(s.wanted());
  s.publish("dtrain_job_restarts_total 1\n");
  CHECK_FALSE(s.wanted());
  const std::string first = read_all(fd);
  ::close(fd);
  CHECK(body_of(first) == "dtrain_job_restarts_total 1\n");
  CHECK(Clock::now() - asked < MetricsServer::kFreshWait);
  // Within kFresh of a publish, a scrape gets it at once and asks for nothing.
  CHECK(body_of(scrape(port)) == "dtrain_job_restarts_total 1\n");
  CHECK_FALSE(s.wanted());
  // Nobody publishes: after kFreshWait the scrape gets the last text.
  std::this_thread::sleep_for(MetricsServer::kFresh);
  const auto began = Clock::now();
  const std::string stale = scrape(port);
  CHECK(s.wanted());
  CHECK(body_of(stale) == "dtrain_job_restarts_total 1\n");
  CHECK(Clock::now() - began >= MetricsServer::kFreshWait - 50ms);
}

#pragma once

// The launcher's /metrics endpoint (observe.metrics_addr): a minimal HTTP/1.1 server for one thing, a Prometheus
// scrape. `GET /metrics` gets the latest published text (prometheus_text.h) with
// `Content-Type: text/plain; version=0.0.4`; another path gets 404, another method 405, a request that is not
// HTTP 400, one whose head is over MetricsServerOptions::max_request_bytes 431. Every connection is closed after
// its one response (no keep-alive: a scrape every few seconds gains nothing from it, and a connection that ends
// after one answer cannot be held open by a client).
//
// The text is made on demand (on_demand.h), as the control socket's snapshot is: a scrape that finds it older than
// kFresh asks, the launcher's loop publishes on its next turn, and the scrape gets that text, or the last one after
// kFreshWait. Rendering 32,768 ranks' metrics every second whether or not anything scrapes them was the launcher's
// largest cost at scale.
//
// One thread poll()s the listening socket and every connection; nothing blocks it. What a hostile or broken client
// can take is bounded (MetricsServerOptions): bytes of request, time per connection, connections at once. So a
// client that sends nothing, sends forever, or never reads its answer costs a file descriptor for a few seconds,
// and the job never notices.
//
// Security: metrics hold the job's name, ranks, node ranks and progress numbers; no token, address or path. A
// non-loopback address is allowed (a Prometheus server on another host scrapes it) and serves them to anyone who
// can reach that port, with no TLS or authentication: bind to 127.0.0.1 unless the network is trusted.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/controller/observe/on_demand.h"
#include "common/status.h"

namespace dtrain::controller {

struct MetricsServerOptions {
  // A scrape's request is a request line and a few headers, a few hundred bytes; 8 KiB is what common servers allow
  // for a request head. A client that sends more is answered 431 and closed, so memory per connection is bounded.
  std::size_t max_request_bytes = 8192;
  // From accept to the last byte of the response: Prometheus' default scrape timeout is 10 s, so a scrape that
  // needs longer has been given up by its scraper anyway. A client that sends nothing or stops reading (slowloris)
  // is closed when it passes.
  std::chrono::milliseconds connection_deadline{10000};
  // Connections at once: a few scrapers need a handful. More are answered 503 and closed at once, so a flood of
  // idle connections costs file descriptors only up to this, and each for at most connection_deadline.
  std::size_t max_connections = 64;
};

class MetricsServer {
 public:
  using Clock = std::chrono::steady_clock;
  // A scrape within this of the last publish is answered with it at once.
  static constexpr std::chrono::milliseconds kFresh{1000};
  // How long a scrape waits for a fresh publish before it gets the last one (at most half of
  // MetricsServerOptions::connection_deadline).
  static constexpr std::chrono::milliseconds kFreshWait{2000};

  // Binds `address` (host:port or [ipv6]:port, port 0 = any free one) and starts the serving thread. `address` is
  // the spec's, already checked; a host that does not resolve, or a port in use, is an error naming both.
  static Result<std::unique_ptr<MetricsServer>> listen(const std::string& address, MetricsServerOptions options = {});
  // Stops the thread and closes every connection.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Where it listens, numeric: "127.0.0.1:40123", "[::1]:9400" (the port that port 0 got).
  const std::string& address() const { return address_; }
  // What the waiting and the next scrapes get.
  void publish(std::string text) { text_->publish(std::move(text)); }
  // Whether a scrape waits for a publish newer than the last.
  bool wanted() const { return text_->wanted(); }

 private:
  struct Connection {
    int fd = -1;
    Clock::time_point deadline;
    std::string request;                       // the head read so far
    std::string head;                          // the response's status line and headers, once answered
    std::shared_ptr<const std::string> body;   // the response's body
    std::size_t sent = 0;                      // of head + body
    bool waiting = false;                      // a scrape waiting for a fresh publish ...
    Clock::time_point wait_until;              // ... at most until then
    std::uint64_t asked = 0;                   // ... newer than this (OnDemandText::ask)
    bool answered() const { return !head.empty(); }
  };

  MetricsServer(int listen_fd, int stop_read, int stop_write, std::unique_ptr<OnDemandText> text, std::string address,
                MetricsServerOptions options);
  void serve();
  void accept_new();
  // Each returns whether the connection stays open.
  bool read_request(Connection& c);
  bool write_response(Connection& c);
  void answer(Connection& c);
  // The 200 answer with `text`.
  void give_text(Connection& c, OnDemandText::Text text);
  // A waiting scrape's answer, once a fresh text was published or its wait ran out; returns whether it stays open.
  bool answer_metrics(Connection& c, OnDemandText::Text text);

  int listen_fd_, stop_read_, stop_write_;
  std::unique_ptr<OnDemandText> text_;
  std::string address_;
  MetricsServerOptions options_;
  std::vector<Connection> connections_;   // the serving thread's own
  std::thread thread_;
};

}  // namespace dtrain::controller

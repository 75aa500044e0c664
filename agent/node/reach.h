#pragma once

// Can this node open a TCP connection to host:port? Used by `dtrain doctor JOB.yaml` to check, before a job, that
// every node reaches node 0's MASTER_PORT range and the other nodes' agents. No gRPC here.

#include <chrono>
#include <string>
#include <vector>

namespace dtrain::node {

struct Reach {
  std::string address;     // host:port as asked
  bool ok = false;
  std::string error;       // why not: "connection refused", "timed out after 2000 ms", "cannot resolve ..."
  unsigned connect_ms = 0;
};

// One TCP connect per address, all at once, each bounded by `timeout`; the connections are closed at once.
std::vector<Reach> reach_all(const std::vector<std::string>& addresses, std::chrono::milliseconds timeout);

// A listening TCP socket on a free port of every interface, as node 0's agent opens for MASTER_PORT. Closed when
// destroyed. Connections are never accepted: the kernel completes the handshake, which is all a probe needs.
class OpenPort {
 public:
  OpenPort();  // throws std::system_error
  ~OpenPort();
  OpenPort(const OpenPort&) = delete;
  OpenPort& operator=(const OpenPort&) = delete;
  unsigned port() const { return port_; }

 private:
  int fd_ = -1;
  unsigned port_ = 0;
};

}  // namespace dtrain::node

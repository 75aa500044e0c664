#include <doctest/doctest.h>

#include "common/status.h"
#include "common/transport.h"

using dtrain::Transport;

TEST_CASE("transport: sessions use TLS on every TCP address, loopback included, unless --insecure") {
  for (const char* address : {"127.0.0.1:7000", "[::1]:7000", "localhost:7000", "unix:/tmp/agent.sock", "10.0.0.2:7000", "node3:7000"}) {
    CAPTURE(address);
    CHECK(dtrain::session_transport(address, false) == Transport::tls);
    CHECK(dtrain::session_transport(address, true) == Transport::plaintext);
  }
}

TEST_CASE("transport: a Unix socket given as an address is no exception; only the private socket is plaintext") {
  CHECK(dtrain::session_transport("unix:/tmp/agent.sock", false) == Transport::tls);
  CHECK(dtrain::kPrivateSocketTransport == Transport::plaintext);
}

TEST_CASE("transport: an agent's port is plaintext only when its sessions come over the socket, or --insecure") {
  CHECK(dtrain::agent_port_transport("127.0.0.1:0", true, false) == Transport::plaintext);
  CHECK(dtrain::agent_port_transport("127.0.0.1:0", false, false) == Transport::tls);
  CHECK(dtrain::agent_port_transport("0.0.0.0:7000", false, false) == Transport::tls);
  CHECK(dtrain::agent_port_transport("0.0.0.0:7000", false, true) == Transport::plaintext);
}

TEST_CASE("status: success by default, a failure keeps its code and message") {
  dtrain::Status ok;
  CHECK(ok.ok());
  dtrain::Status failed(dtrain::StatusCode::not_found, "no such program: trian.py");
  CHECK_FALSE(failed.ok());
  CHECK(failed.code() == dtrain::StatusCode::not_found);
  CHECK(failed.message() == "no such program: trian.py");
  CHECK(std::string(dtrain::status_code_name(failed.code())) == "not_found");
  dtrain::Result<int> value{{}, 42};
  CHECK(value.ok());
  CHECK(value.value == 42);
}

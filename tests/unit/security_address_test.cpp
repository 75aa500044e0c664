// Which addresses count as loopback (plaintext allowed without --insecure), and the explanations of errors that
// have nothing to do with TLS.
#include <doctest/doctest.h>

#include "agent/security/credentials.h"

using dtrain::security::explain_connect_failure;
using dtrain::security::is_loopback_address;

TEST_CASE("loopback addresses") {
  CHECK(is_loopback_address("127.0.0.1:7000"));
  CHECK(is_loopback_address("127.1.2.3:7000"));
  CHECK(is_loopback_address("localhost:7000"));
  CHECK(is_loopback_address("[::1]:7000"));
  CHECK(is_loopback_address("::1"));
  CHECK(is_loopback_address("127.0.0.1"));
  CHECK(is_loopback_address("ipv4:127.0.0.1:7000"));
  CHECK(is_loopback_address("dns:///localhost:7000"));
  CHECK(is_loopback_address("unix:/run/dtrain.sock"));

  CHECK_FALSE(is_loopback_address("0.0.0.0:7000"));  // every interface
  CHECK_FALSE(is_loopback_address("[::]:7000"));
  CHECK_FALSE(is_loopback_address("10.0.0.5:7000"));
  CHECK_FALSE(is_loopback_address("node-1:7000"));
  CHECK_FALSE(is_loopback_address("128.0.0.1:7000"));
  CHECK_FALSE(is_loopback_address("localhost.example.com:7000"));
  CHECK_FALSE(is_loopback_address("[fe80::1]:7000"));
  CHECK_FALSE(is_loopback_address(""));
}

TEST_CASE("errors unrelated to TLS keep gRPC's words") {
  CHECK(explain_connect_failure("10.0.0.5:7000",
                                "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:7000: Failed "
                                "to connect to remote host: Connection refused") ==
        "nothing listens on 10.0.0.5:7000; is `dtrain agent` running there? (gRPC: Failed to connect to remote "
        "host: Connection refused)");
  CHECK(explain_connect_failure("10.0.0.5:7000", "Deadline Exceeded") == "10.0.0.5:7000: Deadline Exceeded");
  grpc::Status refused(grpc::StatusCode::UNAUTHENTICATED, "cluster token missing");
  CHECK(explain_connect_failure("10.0.0.5:7000", refused) ==
        "10.0.0.5:7000 refused the call: cluster token missing");
}

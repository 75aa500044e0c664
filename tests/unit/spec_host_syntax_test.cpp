// The syntax of agent addresses and ssh hosts: each way to get one wrong has its own message.

#include <doctest/doctest.h>

#include "cli/spec/host_syntax.h"

using dtrain::StatusCode;
using dtrain::spec::detail::check_address;
using dtrain::spec::detail::check_ssh_host;

TEST_CASE("check_address: host:port and [ipv6]:port") {
  CHECK(check_address("node1:29400").ok());
  CHECK(check_address("10.0.0.1:1").ok());
  CHECK(check_address("[fe80::1]:65535").ok());
  CHECK(check_address("node1:0", true).ok());

  const auto problem = [](std::string_view address, bool port_zero_ok = false) {
    const dtrain::Status status = check_address(address, port_zero_ok);
    CHECK(status.code() == StatusCode::invalid_argument);
    return status.message();
  };
  CHECK(problem("node1") == "has no port");
  CHECK(problem("fe80::1:29400") == "is ambiguous: write an IPv6 host in brackets");
  CHECK(problem(":29400") == "does not start with a host name or address");
  CHECK(problem("node 1:29400") == "does not start with a host name or address");
  CHECK(problem("[fe80::1]") == "is not [ipv6]:port");
  CHECK(problem("[fe80::1:29400") == "is not [ipv6]:port");
  CHECK(problem("[]:29400") == "has an empty host");
  CHECK(problem("node1:") == "does not end in a port number");
  CHECK(problem("node1:123456") == "does not end in a port number");
  CHECK(problem("node1:http") == "does not end in a port number");
  CHECK(problem("node1:0") == "has a port outside 1-65535");
  CHECK(problem("node1:65536", true) == "has a port outside 1-65535");
}

TEST_CASE("check_ssh_host: [user@]host[:ssh_port]") {
  CHECK(check_ssh_host("node2").ok());
  CHECK(check_ssh_host("alice@node2:2222").ok());
  CHECK(check_ssh_host("a.b-c_d@10.0.0.2").ok());

  const auto problem = [](std::string_view text) {
    const dtrain::Status status = check_ssh_host(text);
    CHECK(status.code() == StatusCode::invalid_argument);
    return status.message();
  };
  CHECK(problem("") == "is empty");
  CHECK(problem("@node2") == "has an invalid user name before '@'");
  CHECK(problem("al ice@node2") == "has an invalid user name before '@'");
  CHECK(problem("node 2") == "is not a host name or IPv4 address");
  CHECK(problem("alice@:22") == "is not a host name or IPv4 address");
  CHECK(problem("node2:") == "does not end in an ssh port number after ':'");
  CHECK(problem("node2:ssh") == "does not end in an ssh port number after ':'");
  CHECK(problem("node2:0") == "has an ssh port outside 1-65535");
  CHECK(problem("node2:99999") == "has an ssh port outside 1-65535");
}

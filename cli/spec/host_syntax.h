#pragma once

// The syntax of the addresses a spec names: an agent or rendezvous address (host:port, or [ipv6]:port) and an ssh
// host ([user@]host[:ssh_port]). A failed check's message is the tail of a sentence about the value, so that
// check_spec can write "'node1' has no port.".

#include <string_view>

#include "common/status.h"

namespace dtrain::spec::detail {

// host:port; IPv6 hosts are written in brackets: [fe80::1]:29400. Port 0 ("any free port") only where
// `port_zero_ok`.
Status check_address(std::string_view address, bool port_zero_ok = false);

// [user@]host[:ssh_port], an entry of nodes.hosts.
Status check_ssh_host(std::string_view text);

}  // namespace dtrain::spec::detail

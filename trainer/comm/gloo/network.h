#pragma once

// Which network a Gloo communicator listens on and connects from, chosen from the environment (see communicator.h).

#include <string>

namespace dtrain::trainer {

struct GlooNetwork {
  std::string interface;  // an interface name, or empty
  std::string hostname;   // an address to bind when interface is empty
  std::string reason;     // how it was chosen, for messages: "GLOO_SOCKET_IFNAME=eth0", "route to MASTER_ADDR=..."
};

// GLOO_SOCKET_IFNAME (first name), else the local address of the route to MASTER_ADDR, else 127.0.0.1.
// Throws CommError when MASTER_ADDR is set but cannot be resolved.
GlooNetwork gloo_network_from_env();

}  // namespace dtrain::trainer

#include "trainer/comm/gloo/network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "trainer/comm/communicator.h"

namespace dtrain::trainer {
namespace {

// The local address the kernel would use to send to `host`: connect a UDP socket (no packet is sent) and read its
// bound address. Empty when there is no route.
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    throw CommError("MASTER_ADDR=" + host + " does not resolve (" + gai_strerror(rc) +
                    "); set GLOO_SOCKET_IFNAME to the interface the ranks share, or fix MASTER_ADDR");
  }
  std::string address;
  for (addrinfo* entry = found; entry != nullptr && address.empty(); entry = entry->ai_next) {
    int fd = socket(entry->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return address;
}

}  // namespace

GlooNetwork gloo_network_from_env() {
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names != nullptr && *names != '\0') {
    std::string first(names);
    first = first.substr(0, first.find(','));
    return {first, "", "GLOO_SOCKET_IFNAME=" + std::string(names)};
  }
  if (const char* master = std::getenv("MASTER_ADDR"); master != nullptr && *master != '\0') {
    std::string address = local_address_towards(master);
    if (!address.empty()) return {"", address, "the route to MASTER_ADDR=" + std::string(master)};
  }
  return {"", "127.0.0.1", "loopback (neither GLOO_SOCKET_IFNAME nor a route to MASTER_ADDR)"};
}

}  // namespace dtrain::trainer

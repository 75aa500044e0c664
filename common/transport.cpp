#include "common/transport.h"

namespace dtrain {

Transport session_transport(std::string_view /*address: the rule is the same for every one*/, bool insecure) {
  return insecure ? Transport::plaintext : Transport::tls;
}

Transport agent_port_transport(std::string_view listen, bool sessions_on_socket, bool insecure) {
  if (sessions_on_socket) return Transport::plaintext;
  return session_transport(listen, insecure);
}

}  // namespace dtrain

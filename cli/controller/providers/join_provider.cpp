// provider join: the launcher listens on nodes.rendezvous; agents started by hand (`dtrain agent --join`) dial in
// and become nodes in join order.

#include "cli/controller/providers/join_provider.h"

#include <algorithm>

#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/transport/launcher_credentials.h"
#include "cli/controller/console/console.h"

namespace dtrain::controller {

void JoinProvider::open_door(ProviderFleet& fleet, const std::string& listen, int max_nodes) {
  const Transport transport = fleet.credentials().transport(listen);
  // Refusals are noted from gRPC's threads: Console::note is one write(2), safe from any thread.
  Console& console = fleet.console();
  join_server_ = std::make_unique<JoinServer>(fleet.events(), listen, fleet.credentials().server(transport), max_nodes,
                                              [&console](const std::string& text) { console.note(text); });
}

void JoinProvider::start(ProviderFleet& fleet) {
  const auto& nodes = fleet.spec().nodes;
  open_door(fleet, nodes.rendezvous, nodes.max_count);
  fleet.console().note("waiting for " + std::string(nodes.min_count == nodes.max_count ? "" : "at least ") +
                       std::to_string(nodes.min_count) + " agents to join at " + nodes.rendezvous +
                       " (dtrain agent --join " + nodes.rendezvous + ")");
}

std::chrono::milliseconds JoinProvider::node_wait(bool, const ProviderFleet& fleet) const {
  // Every round: agents may join (or rejoin on another node) while the launcher waits.
  return spec::duration_ms(fleet.spec().nodes.join_timeout_s);
}

void JoinProvider::on_joined(ProviderFleet& fleet, const Event& event) {
  fleet.attach(event.node, join_server_->session(event.node));
}

void JoinProvider::order(std::vector<int>& nodes, const ProviderFleet& fleet) const {
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&fleet](int a, int b) { return fleet.slot(a).value_or(~0u) < fleet.slot(b).value_or(~0u); });
}

void JoinProvider::close() {
  if (join_server_) join_server_->close();
}

std::unique_ptr<Provider> make_join_provider() { return std::make_unique<JoinProvider>(); }

}  // namespace dtrain::controller

// provider static: the launcher dials the agents listed in nodes.agents, all at once. A fixed-size job needs every
// one of them; an elastic one (nodes.count MIN < MAX) leaves out the agents it cannot reach within
// nodes.join_timeout_s and runs if MIN remain.

#include <stdexcept>
#include <thread>

#include "cli/controller/providers/provider.h"
#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/transport/agent_connection.h"
#include "cli/controller/transport/launcher_credentials.h"

namespace dtrain::controller {
namespace {

class StaticProvider final : public Provider {
 public:
  void start(ProviderFleet& fleet) override {
    const spec::Spec& spec = fleet.spec();
    const auto& agents = spec.nodes.agents;
    const bool elastic = spec.nodes.min_count < spec.nodes.max_count;
    const auto timeout = elastic ? spec::duration_ms(spec.nodes.join_timeout_s) : fleet.options().timeouts.connect;
    std::vector<Status> opened(agents.size());
    std::vector<std::thread> dialers;
    for (std::size_t i = 0; i < agents.size(); ++i) {
      auto connection = AgentConnection::make(static_cast<int>(i), agents[i], fleet.events(), fleet.credentials(),
                                              fleet.credentials().transport(agents[i]));
      fleet.attach(static_cast<int>(i), connection);
      dialers.emplace_back([connection, timeout, &opened, i] { opened[i] = connection->open(timeout); });
    }
    for (auto& t : dialers) t.join();
    for (std::size_t i = 0; i < agents.size(); ++i) {
      if (opened[i].ok()) continue;
      if (!elastic) throw std::runtime_error("node " + std::to_string(i) + ": " + opened[i].message());
      fleet.leave_out(static_cast<int>(i), opened[i].message());
    }
  }

  // Only the first round waits: every agent was dialled at start, and a lost one does not come back.
  std::chrono::milliseconds node_wait(bool first_round, const ProviderFleet& fleet) const override {
    return first_round ? spec::duration_ms(fleet.spec().nodes.join_timeout_s) : std::chrono::milliseconds(0);
  }
  bool may_still_join(const ProviderFleet&) const override { return false; }
};

}  // namespace

std::unique_ptr<Provider> make_static_provider() { return std::make_unique<StaticProvider>(); }

}  // namespace dtrain::controller

#pragma once

// The provider for agents that dial the launcher: join itself, and the base of ssh and slurm, whose agents the
// launcher starts and which then dial back the same way.

#include <memory>
#include <string>

#include "cli/controller/transport/join_server.h"
#include "cli/controller/providers/provider.h"

namespace dtrain::controller {

class JoinProvider : public Provider {
 public:
  void start(ProviderFleet& fleet) override;
  std::chrono::milliseconds node_wait(bool first_round, const ProviderFleet& fleet) const override;
  // Anyone may join until the wait ends.
  bool may_still_join(const ProviderFleet&) const override { return true; }
  void on_joined(ProviderFleet& fleet, const Event& event) override;
  // Node ranks follow the agents' slots (ssh: the index in nodes.hosts; slurm: SLURM_NODEID; `dtrain run`:
  // --node-rank), not the order in which they joined; agents without a slot come after, in join order.
  void order(std::vector<int>& nodes, const ProviderFleet& fleet) const override;
  void close() override;

 protected:
  // Listens for up to `max_nodes` agents on `listen`. Throws std::runtime_error when it cannot.
  void open_door(ProviderFleet& fleet, const std::string& listen, int max_nodes);
  int port() const { return join_server_->port(); }

 private:
  std::unique_ptr<JoinServer> join_server_;
};

}  // namespace dtrain::controller

// provider ssh: one `ssh HOST dtrain agent --join ...` per entry of nodes.hosts (slot = its index).

#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/providers/remote_agents.h"
#include "cli/controller/providers/remote_provider.h"
#include "cli/controller/console/console.h"

namespace dtrain::controller {
namespace {

class SshProvider final : public RemoteProvider {
 public:
  // Some host's agent has not joined and its ssh still runs.
  bool may_still_join(const ProviderFleet& fleet) const override {
    for (int slot = 0; slot < slots(); ++slot) {
      if (fleet.node_of_slot(slot) < 0 && !processes().exited(slot)) return true;
    }
    return false;
  }

  void on_agent_line(ProviderFleet& fleet, const Event& event) override {
    // Before its agent joined, an ssh client's complaints end up in the exit note of its slot (and its log).
    if (!event.is_stderr || fleet.node_of_slot(event.node) < 0) return;
    fleet.console().note(host(fleet, event.node) + ": " + event.text);
  }

 protected:
  int agent_count(ProviderFleet& fleet) const override { return static_cast<int>(fleet.spec().nodes.hosts.size()); }
  std::vector<std::vector<std::string>> commands(const ProviderFleet& fleet, int,
                                                 const RemoteAgentOptions& remote) const override {
    return ssh_agent_commands(fleet.spec(), remote);
  }
  std::string how() const override { return "over ssh"; }
  std::string client() const override { return "ssh "; }
  std::string who(const ProviderFleet& fleet, int slot) const override {
    return "host " + host(fleet, slot) + " (nodes.hosts[" + std::to_string(slot) + "])";
  }
  int node_of_process(const ProviderFleet& fleet, int slot) const override { return fleet.node_of_slot(slot); }

 private:
  static const std::string& host(const ProviderFleet& fleet, int slot) {
    return fleet.spec().nodes.hosts[static_cast<std::size_t>(slot)];
  }
};

}  // namespace

std::unique_ptr<Provider> make_ssh_provider() { return std::make_unique<SshProvider>(); }

}  // namespace dtrain::controller

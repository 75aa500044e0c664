// provider slurm: one `srun ... dtrain agent --join ...` starts an agent on every node of the allocation (one
// process, slot 0; each agent's hello carries its SLURM_NODEID).

#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/providers/remote_agents.h"
#include "cli/controller/providers/remote_provider.h"
#include "cli/controller/console/console.h"

namespace dtrain::controller {
namespace {

class SlurmProvider final : public RemoteProvider {
 public:
  // Fewer agents than asked for have said hello, and srun still runs.
  bool may_still_join(const ProviderFleet& fleet) const override {
    int joined = 0;
    for (std::size_t i = 0; i < fleet.size(); ++i) joined += fleet.slot(static_cast<int>(i)) ? 1 : 0;
    return joined < slots() && !processes().exited(0);
  }

  void on_agent_line(ProviderFleet& fleet, const Event& event) override {
    if (event.is_stderr) fleet.console().note("srun: " + event.text);
  }

 protected:
  int agent_count(ProviderFleet& fleet) const override {
    const int count = slurm_node_count(fleet.spec());
    spec::Spec& spec = fleet.mutable_spec();
    if (spec.nodes.max_count == 0) spec.nodes.min_count = spec.nodes.max_count = count;
    return count;
  }
  std::vector<std::vector<std::string>> commands(const ProviderFleet& fleet, int count,
                                                 const RemoteAgentOptions& remote) const override {
    return {srun_agent_command(fleet.spec(), count, remote)};
  }
  std::string how() const override { return "with srun"; }
  std::string who(const ProviderFleet&, int) const override { return "srun"; }
  int node_of_process(const ProviderFleet&, int) const override { return -1; }
};

}  // namespace

std::unique_ptr<Provider> make_slurm_provider() { return std::make_unique<SlurmProvider>(); }

}  // namespace dtrain::controller

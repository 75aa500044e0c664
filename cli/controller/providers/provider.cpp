#include "cli/controller/providers/provider.h"

namespace dtrain::controller {

void Provider::order(std::vector<int>&, const ProviderFleet&) const {}

void Provider::on_joined(ProviderFleet&, const Event&) {}

void Provider::on_agent_line(ProviderFleet&, const Event&) {}

void Provider::on_agent_exited(ProviderFleet&, const Event&) {}

void Provider::finish(std::chrono::milliseconds, std::chrono::milliseconds, ProviderFleet&) {}

std::unique_ptr<Provider> make_provider(spec::Provider kind) {
  switch (kind) {
    case spec::Provider::local: return make_local_provider();
    case spec::Provider::static_list: return make_static_provider();
    case spec::Provider::join: return make_join_provider();
    case spec::Provider::ssh: return make_ssh_provider();
    case spec::Provider::slurm: return make_slurm_provider();
  }
  return make_local_provider();
}

}  // namespace dtrain::controller

#include "cli/controller/providers/provider.h"

#include "cli/controller/fleet/fleet.h"

namespace dtrain::controller {

void Provider::order(std::vector<int>&, const Fleet&) const {}

void Provider::on_joined(Fleet&, const Event&) {}

void Provider::on_agent_line(Fleet&, const Event&) {}

void Provider::on_agent_exited(Fleet&, const Event&) {}

void Provider::finish(std::chrono::milliseconds, std::chrono::milliseconds, Fleet&) {}

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

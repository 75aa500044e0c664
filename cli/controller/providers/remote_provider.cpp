#include "cli/controller/providers/remote_provider.h"

#include <algorithm>
#include <filesystem>

#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/providers/remote_agents.h"
#include "cli/controller/console/console.h"
#include "common/address.h"

namespace dtrain::controller {

void RemoteProvider::start(ProviderFleet& fleet) {
  const int count = agent_count(fleet);
  const spec::Spec& spec = fleet.spec();
  const std::string listen = rendezvous_listen_address(spec);
  open_door(fleet, listen, count);
  RemoteAgentOptions remote;
  remote.dtrain = spec.nodes.remote_dtrain.empty() ? fleet.options().self_exe : spec.nodes.remote_dtrain;
  remote.join_address = host_of(listen) + ":" + std::to_string(port());
  remote.insecure = fleet.options().insecure;
  remote.secret_dir = fleet.options().secret_dir;  // "" = each node's default directory
  remote.run_dir = std::filesystem::absolute(spec.logs.dir).string();
  remote.join_timeout_s = spec.nodes.join_timeout_s;
  slots_ = count;
  join_failures_.clear();
  fleet.console().note("starting " + std::to_string(count) + " agent" + (count == 1 ? "" : "s") + " " + how() +
                       "; they join at " + remote.join_address + " (their output: " + fleet.job_dir() +
                       "/agent_<n>.log)");
  processes_ = std::make_unique<AgentProcesses>(fleet.events(), fleet.job_dir(), spec::duration_ms(spec.stop.grace_s));
  processes_->start(commands(fleet, count, remote));
}

std::chrono::milliseconds RemoteProvider::node_wait(bool, const ProviderFleet& fleet) const {
  return spec::duration_ms(fleet.spec().nodes.join_timeout_s);
}

void RemoteProvider::on_agent_exited(ProviderFleet& fleet, const Event& event) {
  const int node = node_of_process(fleet, event.node);
  if (node >= 0) {
    // The session says more (and sooner) when the agent dies; an ssh client ending under a live session means
    // its connection to the host dropped.
    if (!fleet.gone(node)) fleet.console().note(who(fleet, event.node) + ": " + client() + event.text);
    return;
  }
  join_failures_.push_back(who(fleet, event.node) + ": " + client() + event.text +
                           " before its agent joined (see " + processes_->log_path(event.node) + ")");
  fleet.console().note(join_failures_.back());
}

void RemoteProvider::finish(std::chrono::milliseconds wait, std::chrono::milliseconds kill_grace,
                            ProviderFleet& fleet) {
  if (processes_ && !processes_->wait_exit(wait, kill_grace)) {
    fleet.console().note("an ssh/srun process did not exit by itself after its agent's session ended; it was killed");
  }
}

}  // namespace dtrain::controller

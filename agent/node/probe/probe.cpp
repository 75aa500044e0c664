#include "agent/node/probe/probe.h"

#include "agent/node/doctor/checks.h"
#include "agent/node/facts.h"
#include "common/clock.h"
#include "common/version.h"

namespace dtrain::agent {

ProbeAnswer Prober::answer(const ProbeRequest& probe) {
  ProbeAnswer result;
  result.id = probe.id;
  result.dtrain_version = std::string(version());
  if (probe.node_checks) {
    node::doctor::GatherOptions options;
    options.log_dir = probe.log_dir;
    options.checkpoint_dir = probe.checkpoint_dir;
    const node::doctor::DoctorInputs inputs = node::doctor::gather_inputs(options);
    result.node_checks_json = node::doctor::render_json(node::doctor::run_node_checks(inputs));
    result.driver_version = inputs.nvml.driver_version;
    result.nccl_version = inputs.nccl.found ? inputs.nccl.version_code : 0;
    for (const auto& [name, address] : node::gather_facts().interfaces) result.interfaces.push_back(name);
  }
  if (probe.open_port) {
    if (!open_port_) open_port_ = std::make_unique<node::OpenPort>();
    result.open_port = open_port_->port();
  }
  if (!probe.reach.empty()) {
    const auto timeout = probe.reach_timeout > std::chrono::milliseconds::zero() ? probe.reach_timeout
                                                                                 : kDefaultReachTimeout;
    result.reach = node::reach_all(probe.reach, timeout);
  }
  result.unix_ms = unix_ms();
  return result;
}

}  // namespace dtrain::agent

#include "agent/probe.h"

#include "agent/node/doctor/checks.h"
#include "agent/node/facts.h"
#include "common/util.h"
#include "common/version.h"

namespace dtrain::agent {

v1::ProbeResult Prober::answer(const v1::Probe& probe) {
  v1::ProbeResult result;
  result.set_id(probe.id());
  result.set_dtrain_version(std::string(version()));
  if (probe.node_checks()) {
    node::doctor::GatherOptions options;
    options.log_dir = probe.log_dir();
    options.checkpoint_dir = probe.checkpoint_dir();
    const node::doctor::DoctorInputs inputs = node::doctor::gather_inputs(options);
    result.set_node_checks_json(node::doctor::render_json(node::doctor::run_node_checks(inputs)));
    result.set_driver_version(inputs.nvml.driver_version);
    result.set_nccl_version(inputs.nccl.found ? inputs.nccl.version_code : 0);
    for (const auto& [name, address] : node::gather_facts().interfaces) result.add_interfaces(name);
  }
  if (probe.open_port()) {
    if (!open_port_) open_port_ = std::make_unique<node::OpenPort>();
    result.set_open_port(open_port_->port());
  }
  if (probe.reach_size() > 0) {
    const std::vector<std::string> addresses(probe.reach().begin(), probe.reach().end());
    const auto timeout = std::chrono::milliseconds(probe.reach_timeout_ms() > 0 ? probe.reach_timeout_ms() : 2000);
    for (const auto& r : node::reach_all(addresses, timeout)) {
      auto* out = result.add_reach();
      out->set_address(r.address);
      out->set_ok(r.ok);
      out->set_error(r.error);
      out->set_connect_ms(r.connect_ms);
    }
  }
  result.set_unix_ms(unix_ms());
  return result;
}

}  // namespace dtrain::agent

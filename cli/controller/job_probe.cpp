#include "cli/controller/job_probe.h"

#include "common/clock.h"

namespace dtrain::controller {

void JobProbe::on_report(int node, const AgentReport& report) {
  const auto* result = std::get_if<ProbeResult>(&report);
  if (!result) return;
  received_ms_.emplace(node, unix_ms());
  results_[{node, result->id}] = *result;
}

const ProbeResult* JobProbe::result(int node, std::uint32_t id) const {
  auto it = results_.find({node, id});
  return it == results_.end() ? nullptr : &it->second;
}

void JobProbe::collect(std::uint32_t id, std::chrono::milliseconds timeout) {
  const auto all_answered = [this, id] {
    if (interrupts_.interrupted()) return true;
    for (int node : nodes_) {
      if (!result(node, id) && fleet_.state(node) != NodeState::lost) return false;
    }
    return true;
  };
  fleet_.pump_until(all_answered, fleet_.now() + timeout);
}

std::vector<ProbedNode> JobProbe::run(const std::vector<int>& nodes, const std::string& log_dir,
                                      const std::string& checkpoint_dir, std::chrono::milliseconds timeout) {
  nodes_ = nodes;
  for (std::size_t rank = 0; rank < nodes_.size(); ++rank) {
    ProbeRequest checks;
    checks.id = 1;
    checks.node_checks = true;
    checks.log_dir = log_dir;
    checks.checkpoint_dir = checkpoint_dir;
    checks.open_port = rank == 0;
    fleet_.send(nodes_[rank], checks);
  }
  collect(1, timeout);
  // Node 0's open port and every agent's address, as the other nodes must reach them.
  const int node0 = nodes_.front();
  std::string master;
  if (const ProbeResult* r = result(node0, 1); r && r->open_port != 0) {
    master = fleet_.info(node0).address + ":" + std::to_string(r->open_port);
  }
  for (std::size_t rank = 0; rank < nodes_.size(); ++rank) {
    ProbeRequest reach;
    reach.id = 2;
    reach.reach_timeout_ms = static_cast<std::uint32_t>(timeouts_.reach_probe.count());
    if (rank != 0 && !master.empty()) reach.reach.push_back(master);
    for (std::size_t other = 0; other < nodes_.size(); ++other) {
      if (other != rank) reach.reach.push_back(fleet_.info(nodes_[other]).agent_address);
    }
    fleet_.send(nodes_[rank], reach);
  }
  collect(2, timeout);
  std::vector<ProbedNode> out;
  for (std::size_t rank = 0; rank < nodes_.size(); ++rank) {
    const int node = nodes_[rank];
    ProbedNode probed;
    probed.node_rank = static_cast<unsigned>(rank);
    probed.hostname = fleet_.info(node).hostname;
    if (const ProbeResult* r = result(node, 1)) {
      probed.checks = *r;
      probed.clock_offset_ms = static_cast<double>(r->unix_ms) - static_cast<double>(received_ms_[node]);
    }
    if (const ProbeResult* r = result(node, 2)) probed.reach = *r;
    out.push_back(std::move(probed));
  }
  return out;
}

}  // namespace dtrain::controller

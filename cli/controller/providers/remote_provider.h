#pragma once

// providers ssh and slurm: the launcher starts the agents on the hosts itself (agent_processes.h runs the ssh or
// srun commands that remote_agents.h builds), and they dial back as with provider join. Node ranks follow each
// agent's slot (its index in nodes.hosts, or its SLURM_NODEID), whatever the order in which they join.

#include <memory>
#include <string>
#include <vector>

#include "cli/controller/providers/agent_processes.h"
#include "cli/controller/providers/join_provider.h"
#include "cli/controller/providers/remote_agents.h"

namespace dtrain::controller {

class RemoteProvider : public JoinProvider {
 public:
  void start(ProviderFleet& fleet) override;
  std::chrono::milliseconds node_wait(bool first_round, const ProviderFleet& fleet) const override;
  void on_agent_exited(ProviderFleet& fleet, const Event& event) override;
  std::vector<std::string> join_failures() const override { return join_failures_; }
  void finish(std::chrono::milliseconds wait, std::chrono::milliseconds kill_grace, ProviderFleet& fleet) override;

 protected:
  // How many agents to start (fills nodes.count when the spec leaves it to the allocation).
  virtual int agent_count(ProviderFleet& fleet) const = 0;
  // The commands that start them, one per process (ssh: one per host; slurm: one srun for all).
  virtual std::vector<std::vector<std::string>> commands(const ProviderFleet& fleet, int count,
                                                         const RemoteAgentOptions& remote) const = 0;
  // "over ssh", "with srun".
  virtual std::string how() const = 0;
  // What an agent process's exit text is prefixed with ("ssh " for ssh clients).
  virtual std::string client() const { return ""; }
  // Who process `slot` speaks for, in notes: "host H (nodes.hosts[I])", "srun".
  virtual std::string who(const ProviderFleet& fleet, int slot) const = 0;
  // The fleet node whose agent process `slot` started, or -1 (before it joined; always for srun).
  virtual int node_of_process(const ProviderFleet& fleet, int slot) const = 0;

  AgentProcesses& processes() const { return *processes_; }
  int slots() const { return slots_; }

 private:
  std::unique_ptr<AgentProcesses> processes_;
  int slots_ = 0;                            // how many agents were asked for
  std::vector<std::string> join_failures_;   // "host: how its ssh/srun ended" before its agent joined
};

}  // namespace dtrain::controller

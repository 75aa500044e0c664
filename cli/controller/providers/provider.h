#pragma once

// How a job gets its agents: one strategy per nodes.provider, each in its own file.
//
//   local         starts one agent per simulated node on this host and dials its private socket
//   static        dials the agents listed in nodes.agents
//   join          listens on nodes.rendezvous; agents started by hand dial in
//   ssh, slurm    start agents on the hosts (ssh per host, one srun for all), which dial back as with join
//
// The Fleet asks its provider only what differs between them; everything else (sessions, heartbeats, node
// timeouts, losing nodes, selecting a round's nodes) is the Fleet's, the same for all.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/controller/session/event_queue.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

class ProviderFleet;   // provider_fleet.h: what a provider sees of the fleet

class Provider {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Provider() = default;

  // Starts or dials the agents (or opens the door for them); their sessions become the fleet's nodes. Throws
  // std::runtime_error when the job cannot have its nodes at all.
  virtual void start(ProviderFleet& fleet) = 0;

  // How long selecting a round's nodes may wait for agents to say hello: the first round waits for every node, a
  // later one only where agents dial in (a node lost before never comes back under the same id).
  virtual std::chrono::milliseconds node_wait(bool first_round, const ProviderFleet& fleet) const = 0;
  // Whether an agent that has no session yet may still arrive (join: until the wait ends; ssh/slurm: while one
  // of the processes started for it runs and it has not joined; local/static: never, all were dialled at start).
  virtual bool may_still_join(const ProviderFleet& fleet) const = 0;
  // Orders the selected nodes (fleet ids) into node ranks. Default: the fleet's order (dial or join order).
  virtual void order(std::vector<int>& nodes, const ProviderFleet& fleet) const;
  // Whether workers are told the interface peers reach their node on (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME):
  // every provider but local, whose nodes share loopback.
  virtual bool tunes_interface() const { return true; }

  // Events of the agent processes the provider started, and of agents dialling in.
  virtual void on_joined(ProviderFleet& fleet, const Event& event);
  virtual void on_agent_line(ProviderFleet& fleet, const Event& event);
  virtual void on_agent_exited(ProviderFleet& fleet, const Event& event);
  // Why agents it started never joined, for the "too few nodes" message.
  virtual std::vector<std::string> join_failures() const { return {}; }

  // The job is over: refuse later joins.
  virtual void close() {}
  // After every session ended: waits for the agent processes it started to exit, up to `wait`, then stops the
  // rest (SIGTERM, `kill_grace`, SIGKILL), and says so on the console.
  virtual void finish(std::chrono::milliseconds wait, std::chrono::milliseconds kill_grace, ProviderFleet& fleet);
};

std::unique_ptr<Provider> make_local_provider();
std::unique_ptr<Provider> make_static_provider();
std::unique_ptr<Provider> make_join_provider();
std::unique_ptr<Provider> make_ssh_provider();
std::unique_ptr<Provider> make_slurm_provider();
// The provider that nodes.provider names.
std::unique_ptr<Provider> make_provider(spec::Provider kind);

}  // namespace dtrain::controller

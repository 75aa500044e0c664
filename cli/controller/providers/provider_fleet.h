#pragma once

// What a provider sees of the fleet it fills (the launcher's Fleet implements it; fleet/ links providers/, never
// the other way), and the options the fleet is made with, which providers read too.
//
// No gRPC here: the launcher's credentials are only named. Providers that dial or listen include
// transport/launcher_credentials.h in their own .cpp, the transport edge.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cli/controller/providers/provider.h"
#include "cli/controller/round/timeouts.h"
#include "cli/controller/session/event_queue.h"
#include "cli/spec/spec.h"

namespace dtrain::controller {

class Console;
class FleetClock;
class LauncherCredentials;
class NodeSession;

struct FleetOptions {
  std::string self_exe;        // the dtrain binary (local agents, and remote ones without nodes.remote_dtrain)
  bool insecure = false;       // --insecure
  std::string secret_dir;      // "" = the default directory
  bool probing = false;        // dtrain doctor: report problems (a missing nodes.interface) instead of failing
                               //   nodes over them
  Timeouts timeouts;
  std::shared_ptr<FleetClock> clock;                   // nullptr = the steady clock (fleet/fleet.h)
  std::function<std::unique_ptr<Provider>()> provider; // nullptr = the one nodes.provider names (tests give others)
};

class ProviderFleet {
 public:
  virtual ~ProviderFleet() = default;

  // The launcher's spec; provider slurm fills nodes.count from the allocation through mutable_spec().
  virtual const spec::Spec& spec() const = 0;
  virtual spec::Spec& mutable_spec() = 0;
  virtual const FleetOptions& options() const = 0;
  // <logs.dir>/<job id>: where the agent processes a provider starts write their output.
  virtual const std::string& job_dir() const = 0;
  // Where sessions and agent processes post their events.
  virtual EventQueue& events() = 0;
  virtual Console& console() = 0;
  // The launcher's credentials for dialing agents and for the join server (one per fleet: the cluster secret is
  // read once).
  virtual LauncherCredentials& credentials() = 0;

  // Adds (or, for a joined agent, fills) node `id` with its session; it says hello next.
  virtual void attach(int id, std::shared_ptr<NodeSession> session) = 0;
  // A node that could not be had at all (static, elastic): lost before it ever connected.
  virtual void leave_out(int id, const std::string& why) = 0;
  // Gives the node up with `why` (its agent process ended).
  virtual void lose(int node, const std::string& why) = 0;
  // True when the node is lost or its session ended.
  virtual bool gone(int node) const = 0;
  // How many nodes the fleet has had (ids 0 .. size()-1).
  virtual std::size_t size() const = 0;
  // ssh/slurm: which host the node's hello said it is (--slot).
  virtual std::optional<unsigned> slot(int node) const = 0;
  // The node whose hello carried `slot`, or -1.
  virtual int node_of_slot(int slot) const = 0;
};

}  // namespace dtrain::controller

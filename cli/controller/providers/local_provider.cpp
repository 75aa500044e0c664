// provider local: one agent per simulated node on this host, started by the launcher and reached over a private
// socket each (common/transport.h: plaintext there, the agent checks the peer's uid).

#include <filesystem>
#include <stdexcept>

#include "cli/controller/providers/agent_processes.h"
#include "cli/controller/providers/provider.h"
#include "cli/controller/providers/provider_fleet.h"
#include "cli/controller/transport/agent_connection.h"
#include "cli/controller/console/console.h"

namespace dtrain::controller {
namespace {

class LocalProvider final : public Provider {
 public:
  void start(ProviderFleet& fleet) override {
    start_agents(fleet);
    dial_agents(fleet);
  }

  // Every round waits for all of them: local agents do not come back, but they are all there at once.
  std::chrono::milliseconds node_wait(bool, const ProviderFleet& fleet) const override {
    return fleet.options().timeouts.agent_start;
  }
  bool may_still_join(const ProviderFleet&) const override { return false; }
  bool tunes_interface() const override { return false; }

  void on_agent_line(ProviderFleet& fleet, const Event& event) override {
    if (event.is_stderr) fleet.console().note("node " + std::to_string(event.node) + " agent: " + event.text);
  }

  void on_agent_exited(ProviderFleet& fleet, const Event& event) override {
    if (event.node >= 0 && static_cast<std::size_t>(event.node) < fleet.size()) {
      fleet.lose(event.node, "its agent process " + event.text);
    }
  }

  void finish(std::chrono::milliseconds wait, std::chrono::milliseconds kill_grace, ProviderFleet& fleet) override {
    if (processes_ && !processes_->wait_exit(wait, kill_grace)) {
      fleet.console().note("a local agent did not exit by itself; it was killed with everything it had started");
    }
  }

 private:
  // One agent process per simulated node, each listening on its own private socket.
  void start_agents(ProviderFleet& fleet) {
    const spec::Spec& spec = fleet.spec();
    processes_ =
        std::make_unique<AgentProcesses>(fleet.events(), fleet.job_dir(), spec::duration_ms(spec.stop.grace_s));
    // The agents place the job's files in <run dir>/<job id>, which is the job's directory itself with the run
    // dir set to <logs.dir> (and dtrain doctor's disk check looks there).
    const std::string run_dir = std::filesystem::absolute(spec.logs.dir).string();
    std::vector<std::vector<std::string>> argvs;
    for (int i = 0; i < spec.nodes.max_count; ++i) {
      argvs.push_back({fleet.options().self_exe, "agent", "--listen", "127.0.0.1:0", "--quiet", "--session-socket",
                       processes_->session_socket(i), "--run-dir", run_dir});
      // Relative to where dtrain was started, like every path of a spec; the agents may run elsewhere.
      if (!spec.nodes.topology.empty()) {
        argvs.back().insert(argvs.back().end(),
                            {"--topology", std::filesystem::absolute(spec.nodes.topology).string()});
      }
    }
    processes_->start(std::move(argvs));
  }

  // The sockets' paths are known before the agents listen: the channels (and gRPC itself) are set up while the
  // agents start, and dial once they report.
  void dial_agents(ProviderFleet& fleet) {
    const auto& timeouts = fleet.options().timeouts;
    std::vector<std::shared_ptr<AgentConnection>> connections;
    for (int i = 0; i < fleet.spec().nodes.max_count; ++i) {
      connections.push_back(AgentConnection::make(i, "unix:" + processes_->session_socket(i), fleet.events(),
                                                  fleet.credentials(), kPrivateSocketTransport));
    }
    processes_->wait_addresses(timeouts.agent_start);
    for (std::size_t i = 0; i < connections.size(); ++i) {
      fleet.attach(static_cast<int>(i), connections[i]);
      if (Status opened = connections[i]->open(timeouts.connect); !opened.ok()) {
        throw std::runtime_error("node " + std::to_string(i) + ": " + opened.message());
      }
    }
  }

  std::unique_ptr<AgentProcesses> processes_;
};

}  // namespace

std::unique_ptr<Provider> make_local_provider() { return std::make_unique<LocalProvider>(); }

}  // namespace dtrain::controller

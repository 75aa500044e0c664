#pragma once

// The agent processes a launcher starts itself, one per slot:
//  * provider local: `dtrain agent --listen 127.0.0.1:0 --session-socket DIR/agent_<slot>.sock` per simulated node
//    (slot = node id); the launcher dials the socket, a private channel no other user can reach, and its workers
//    use the store at the TCP address each agent prints;
//  * provider ssh: `ssh HOST dtrain agent --join ...` per host (slot = index in nodes.hosts);
//  * provider slurm: one `srun ... dtrain agent --join ...` for every node (slot 0).
// They run under a Supervisor, so they get their own process groups, die with the launcher (parent-death signal
// SIGTERM: a local agent stops its workers first; a remote one loses its session and stops them within its lease),
// and anything left of them is killed when the launcher ends. Their output goes to <log_dir>/agent_<slot>.log;
// stderr lines and exits become events (agent_line, agent_exited) for their slot.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/supervisor/runtime_dir.h"
#include "agent/supervisor/supervisor.h"
#include "cli/controller/session/event_queue.h"

namespace dtrain::controller {

class AgentProcesses {
 public:
  // `stop_grace`: if this launcher dies, how long each agent (SIGTERM from its keeper) has to stop its workers with
  // the job's stop.grace_s before its keeper SIGKILLs whatever is left below it.
  AgentProcesses(EventQueue& events, std::string log_dir, std::chrono::milliseconds stop_grace);
  ~AgentProcesses();

  // Starts one process per argv; process i is slot i.
  void start(std::vector<std::vector<std::string>> argvs);

  // Local agents: waits until each printed "dtrain-agent listening on ADDR" and returns the addresses by slot, or
  // throws std::runtime_error naming the agent that failed and why.
  std::vector<std::string> wait_addresses(std::chrono::milliseconds timeout);

  // Whether slot's process has exited.
  bool exited(int slot);

  // Waits for every process to exit by itself; after `timeout` stops what is left (and its descendants): SIGTERM,
  // `kill_grace`, SIGKILL. Returns true if they all exited by themselves.
  bool wait_exit(std::chrono::milliseconds timeout,
                 std::chrono::milliseconds kill_grace = std::chrono::milliseconds(1000));

  std::string log_path(int slot) const { return log_dir_ + "/agent_" + std::to_string(slot) + ".log"; }

  // Local agents: the path of slot's session socket (`dtrain agent --session-socket`), in a directory that only
  // this user can enter (0700, beside the agents' own: RuntimeDir), made on first use and removed with this object;
  // if this launcher is SIGKILLed, the next launcher or agent to start removes it. Throws std::runtime_error when it
  // cannot be made.
  std::string session_socket(int slot);

 private:
  EventQueue& events_;
  std::string log_dir_;
  std::chrono::milliseconds orphan_grace_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> addresses_;
  std::vector<std::string> exits_;    // non-empty once slot i exited: how
  int running_ = 0;
  std::optional<supervisor::RuntimeDir> socket_dir_;  // unset until session_socket() made it
  supervisor::Supervisor supervisor_;  // last: its thread stops before the state above goes away
};

}  // namespace dtrain::controller

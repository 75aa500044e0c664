#pragma once

// provider: local — the launcher starts one `dtrain agent --listen 127.0.0.1:0 --one-shot` process per simulated
// node and then drives it over gRPC exactly like a remote agent. The agents run under a Supervisor, so they get
// their own process groups, die with the launcher (parent-death signal SIGTERM: they stop their workers first),
// and anything left of them is killed when the launcher ends.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "agent/supervisor/supervisor.h"
#include "cli/controller/event_queue.h"

namespace dtrain::controller {

class LocalAgents {
 public:
  // `self_exe`: the dtrain binary; `log_dir`: each agent's own output goes to <log_dir>/agent_<node>.log.
  LocalAgents(EventQueue& events, std::string self_exe, std::string log_dir);
  ~LocalAgents();

  // Starts `count` agents and waits until each printed the address it listens on. Returns the addresses, or
  // throws std::runtime_error naming the agent that failed and why.
  std::vector<std::string> start(int count, std::chrono::milliseconds timeout);

  // Waits for every agent process to exit by itself; after `timeout` kills what is left (and its descendants).
  // Returns true if they all exited by themselves.
  bool wait_exit(std::chrono::milliseconds timeout);

 private:
  EventQueue& events_;
  std::string self_exe_;
  std::string log_dir_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> addresses_;
  std::vector<std::string> exits_;    // non-empty once agent i exited
  int running_ = 0;
  supervisor::Supervisor supervisor_;  // last: its thread stops before the state above goes away
};

}  // namespace dtrain::controller

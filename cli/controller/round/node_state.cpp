#include "cli/controller/round/node_state.h"

namespace dtrain::controller {

std::optional<NodeState> next_state(NodeState from, NodeEvent event) {
  const bool live = from == NodeState::connecting || from == NodeState::ready;
  switch (event) {
    case NodeEvent::hello:
      if (from == NodeState::connecting) return NodeState::ready;
      return std::nullopt;   // a second hello, or one from a node that is gone
    case NodeEvent::failed:
      if (live) return NodeState::lost;
      return std::nullopt;   // lost once is enough; a closed session fails nothing
    case NodeEvent::session_ended:
      if (live) return NodeState::closed;
      if (from == NodeState::lost) return NodeState::lost;
      return std::nullopt;
  }
  return std::nullopt;
}

const char* state_name(NodeState state) {
  switch (state) {
    case NodeState::connecting: return "connecting";
    case NodeState::ready: return "ready";
    case NodeState::lost: return "lost";
    case NodeState::closed: return "closed";
  }
  return "?";
}

std::optional<GroupState> next_state(GroupState from, GroupEvent event) {
  switch (event) {
    case GroupEvent::start:
      if (from == GroupState::idle) return GroupState::running;
      return std::nullopt;   // a group is started once per round
    case GroupEvent::done:
      if (from == GroupState::running) return GroupState::done;
      if (from == GroupState::stopping) return GroupState::stopping;
      return std::nullopt;   // done for a group never started, or twice
    case GroupEvent::stop:
      if (from == GroupState::running || from == GroupState::done || from == GroupState::stopping) {
        return GroupState::stopping;
      }
      return std::nullopt;   // nothing to stop
    case GroupEvent::stopped:
      if (from == GroupState::stopping) return GroupState::stopped;
      return std::nullopt;   // a confirmation nobody asked for
  }
  return std::nullopt;
}

const char* state_name(GroupState state) {
  switch (state) {
    case GroupState::idle: return "idle";
    case GroupState::running: return "running";
    case GroupState::done: return "done";
    case GroupState::stopping: return "stopping";
    case GroupState::stopped: return "stopped";
  }
  return "?";
}

}  // namespace dtrain::controller

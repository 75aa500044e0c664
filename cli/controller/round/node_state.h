#pragma once

// The two lifecycles the launcher tracks per node, each an enum with one transition function. A move the
// function refuses (nullopt) is one that must never happen; callers ignore the event that asked for it.
//
// A node's session (Fleet):
//
//   connecting --hello--> ready
//       |                   |
//       +------failed-------+-----> lost     (never part of a round again; its session may still be closing)
//       |                   |
//       +---session_ended---+-----> closed   (the session ended while the job was ending)
//
//   lost --session_ended--> lost: the stream of a lost node ends after it was given up.
//
// A node's worker group in one round (Round):
//
//   idle --start--> running --done--> done
//                      |                |
//                     stop             stop
//                      v                v
//                   stopping <----------+ --stopped--> stopped
//
//   stopping --stop--> stopping (a second StopGroup with no grace, after a second Ctrl-C);
//   stopping --done--> stopping (the workers ended by themselves as the stop arrived: the confirmation follows).

#include <optional>

namespace dtrain::controller {

enum class NodeState { connecting, ready, lost, closed };
enum class NodeEvent {
  hello,           // the agent said who it is
  failed,          // lost: no message within the node timeout, its session broke, it reported an error, ...
  session_ended,   // its session ended while the launcher was shutting down
};
std::optional<NodeState> next_state(NodeState from, NodeEvent event);
const char* state_name(NodeState state);

enum class GroupState { idle, running, done, stopping, stopped };
enum class GroupEvent {
  start,     // StartGroup sent
  done,      // GroupDone: every worker on the node exited by itself
  stop,      // StopGroup sent
  stopped,   // GroupStopped: the StopGroup completed
};
std::optional<GroupState> next_state(GroupState from, GroupEvent event);
const char* state_name(GroupState state);

}  // namespace dtrain::controller

#pragma once

// The lifecycle of a round on one node, as JobRunner follows it:
//
//   idle --prepare_round (node 0 only)--> prepared --start_group--> running --all exited by themselves--> done
//                                                                     |                                    |
//                                                                stop_group                           stop_group
//                                                                     v                                    v
//                                                                  stopping --no descendant left--> stopped
//
// A new start_group is accepted from done/stopped/idle/prepared; one arriving while running or stopping is
// refused, and done or stopped become running again only through a new start_group. A stop_group is obeyed in
// every state (the launcher waits for its GroupStopped), so any state may move to stopping. A round prepares again
// from idle, done or stopped; PrepareRound arriving while a group runs or stops leaves the state as it is.

#include <optional>

namespace dtrain::agent {

enum class RoundState {
  idle,      // no round started on this node yet
  prepared,  // node 0 reserved MASTER_PORT and opened the round's store namespace
  running,   // the group was started; some worker has not exited yet
  done,      // every worker exited by itself (GroupDone was sent)
  stopping,  // a stop is sweeping the job's processes
  stopped,   // the stop found nothing left (GroupStopped was sent)
};

enum class RoundEvent {
  prepare,     // PrepareRound
  start,       // StartGroup, accepted
  all_exited,  // the last worker of the group exited
  stop,        // StopGroup, or the session ended
  swept,       // the stop's sweep found no descendant left
};

// The state `event` leads to from `from`, or nullopt where the event must not change it (an illegal move the
// caller refuses or ignores).
std::optional<RoundState> transition(RoundState from, RoundEvent event);

}  // namespace dtrain::agent

// The launcher's two lifecycles: every move the diagrams in node_state.h allow, and the ones that must never happen.

#include <doctest/doctest.h>

#include "cli/controller/round/node_state.h"

using namespace dtrain::controller;

TEST_CASE("node state: connecting -> ready on hello; connecting or ready -> lost or closed") {
  CHECK(next_state(NodeState::connecting, NodeEvent::hello) == NodeState::ready);
  for (NodeState live : {NodeState::connecting, NodeState::ready}) {
    CAPTURE(state_name(live));
    CHECK(next_state(live, NodeEvent::failed) == NodeState::lost);
    CHECK(next_state(live, NodeEvent::session_ended) == NodeState::closed);
  }
  // A lost node's session ends after it was given up: it stays lost.
  CHECK(next_state(NodeState::lost, NodeEvent::session_ended) == NodeState::lost);
}

TEST_CASE("node state: moves that must never happen") {
  // A second hello must not configure a node again; a gone node never comes back.
  CHECK_FALSE(next_state(NodeState::ready, NodeEvent::hello));
  CHECK_FALSE(next_state(NodeState::lost, NodeEvent::hello));
  CHECK_FALSE(next_state(NodeState::closed, NodeEvent::hello));
  // Lost once: no second note, no second failure of the round.
  CHECK_FALSE(next_state(NodeState::lost, NodeEvent::failed));
  // A session that ended with the job is not a failure afterwards.
  CHECK_FALSE(next_state(NodeState::closed, NodeEvent::failed));
  CHECK_FALSE(next_state(NodeState::closed, NodeEvent::session_ended));
}

TEST_CASE("group state: idle -> running -> done; stop from running or done; stopping -> stopped") {
  CHECK(next_state(GroupState::idle, GroupEvent::start) == GroupState::running);
  CHECK(next_state(GroupState::running, GroupEvent::done) == GroupState::done);
  CHECK(next_state(GroupState::running, GroupEvent::stop) == GroupState::stopping);
  CHECK(next_state(GroupState::done, GroupEvent::stop) == GroupState::stopping);
  CHECK(next_state(GroupState::stopping, GroupEvent::stopped) == GroupState::stopped);
  // A second StopGroup without grace (second Ctrl-C), and workers that end as the stop arrives.
  CHECK(next_state(GroupState::stopping, GroupEvent::stop) == GroupState::stopping);
  CHECK(next_state(GroupState::stopping, GroupEvent::done) == GroupState::stopping);
}

TEST_CASE("group state: moves that must never happen") {
  // Started once per round; a new round is a new group.
  for (GroupState s : {GroupState::running, GroupState::done, GroupState::stopping, GroupState::stopped}) {
    CAPTURE(state_name(s));
    CHECK_FALSE(next_state(s, GroupEvent::start));
  }
  // Done without a start, done twice, or after the stop completed.
  CHECK_FALSE(next_state(GroupState::idle, GroupEvent::done));
  CHECK_FALSE(next_state(GroupState::done, GroupEvent::done));
  CHECK_FALSE(next_state(GroupState::stopped, GroupEvent::done));
  // Nothing to stop, and a confirmation nobody asked for.
  CHECK_FALSE(next_state(GroupState::idle, GroupEvent::stop));
  CHECK_FALSE(next_state(GroupState::stopped, GroupEvent::stop));
  CHECK_FALSE(next_state(GroupState::idle, GroupEvent::stopped));
  CHECK_FALSE(next_state(GroupState::running, GroupEvent::stopped));
  CHECK_FALSE(next_state(GroupState::done, GroupEvent::stopped));
}

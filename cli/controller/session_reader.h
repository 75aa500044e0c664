#pragma once

// The reading half of a session, shared by both transports (AgentConnection, JoinedSession).

#include "cli/controller/event_queue.h"
#include "cli/controller/wire.h"
#include "dtrain/v1/session.pb.h"

namespace dtrain::controller {

// One AgentMessage read from node `node`'s session, as the Event the controller reacts to.
inline void push_report(EventQueue& events, int node, const v1::AgentMessage& message) {
  Event event;
  event.kind = Event::Kind::report;
  event.node = node;
  event.report = wire::from_wire(message);
  events.push(std::move(event));
}

// Node `node`'s session stream ended (nothing more can be read from it).
inline void push_session_closed(EventQueue& events, int node) {
  Event closed;
  closed.kind = Event::Kind::session_closed;
  closed.node = node;
  events.push(std::move(closed));
}

// Turns every AgentMessage read from one blocking session stream (the launcher's dial of an agent) into an Event
// for `node`, then one session_closed once the stream ends. Runs on the stream's reader thread.
// `on_message` runs before each message is queued (may be empty).
template <class Stream, class OnMessage>
void pump_session(Stream& stream, int node, EventQueue& events, OnMessage on_message) {
  v1::AgentMessage message;
  while (stream.Read(&message)) {
    on_message();
    push_report(events, node, message);
    message.Clear();
  }
  push_session_closed(events, node);
}

}  // namespace dtrain::controller

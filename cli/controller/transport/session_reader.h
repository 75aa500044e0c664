#pragma once

// The reading half of a session, shared by both transports (AgentConnection, JoinedSession).

#include "cli/controller/session/event_queue.h"
#include "cli/controller/transport/wire.h"
#include "dtrain/v1/session.pb.h"

namespace dtrain::controller {

// One AgentMessage read from node `node`'s session, as the Events the controller reacts to: one, or one for each
// message of a Batch, in order. A batch inside a batch is not unpacked (no agent sends one): it is a sign of life.
inline void push_report(EventQueue& events, int node, const v1::AgentMessage& message) {
  const auto event_of = [&](const v1::AgentMessage& one) {
    Event event;
    event.kind = Event::Kind::report;
    event.node = node;
    event.report = wire::from_wire(one);
    return event;
  };
  // An agent older than AgentMessage.sent_unix_ms stamps its heartbeats alone.
  const std::uint64_t sent = message.sent_unix_ms() != 0 ? message.sent_unix_ms()
                             : message.has_heartbeat()   ? message.heartbeat().sent_unix_ms()
                                                         : 0;
  if (!message.has_batch()) {
    Event event = event_of(message);
    event.sent_unix_ms = sent;
    events.push(std::move(event));
    return;
  }
  std::vector<Event> all;
  all.reserve(static_cast<std::size_t>(message.batch().messages_size()));
  for (const auto& inner : message.batch().messages()) all.push_back(event_of(inner));
  if (!all.empty()) all.front().sent_unix_ms = sent;
  events.push_all(all);
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

#pragma once

// The launcher's end of one agent session, whichever side dialed: AgentConnection (the launcher dialed an agent
// started with --listen) or JoinedSession (an agent started with --join dialed the launcher). Messages from the
// agent arrive as Events; the controller thread is the only writer. Implementations convert at the edge (wire.h):
// nothing behind this interface sees a protocol message.

#include <string>

#include "cli/controller/session/session_messages.h"
#include "common/status.h"

namespace dtrain::controller {

class NodeSession {
 public:
  virtual ~NodeSession() = default;
  // False when the stream is broken or already finished.
  virtual bool send(const Command& command) = 0;
  // Sends the session's last message and half-closes.
  virtual bool send_last(const Command& command) = 0;
  // After a session_closed event, or to end the session: how it ended, in words a user can act on (a failure's
  // message says why the agent could not be reached or why the connection broke). Idempotent.
  virtual Status finish() = 0;
  // Ends the session from this side at once.
  virtual void cancel() = 0;
  // Where the agent is ("10.0.0.2:29400", or the peer of a joined agent).
  virtual std::string address() const = 0;
  // True until finish().
  virtual bool open() const = 0;
};

}  // namespace dtrain::controller

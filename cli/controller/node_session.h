#pragma once

// The launcher's end of one agent session, whichever side dialed: AgentConnection (the launcher dialed an agent
// started with --listen) or JoinedSession (an agent started with --join dialed the launcher). Messages from the
// agent arrive as Events; the controller thread is the only writer.

#include <string>

#include "dtrain/v1/session.pb.h"

namespace dtrain::controller {

class NodeSession {
 public:
  virtual ~NodeSession() = default;
  // False when the stream is broken or already finished.
  virtual bool send(const v1::LauncherMessage& message) = 0;
  // Sends the session's last message and half-closes.
  virtual bool send_last(const v1::LauncherMessage& message) = 0;
  // After a session_closed event, or to end the session: the final status text ("" when clean). Idempotent.
  virtual std::string finish() = 0;
  // Ends the session from this side at once.
  virtual void cancel() = 0;
  // Where the agent is ("10.0.0.2:29400", or the peer of a joined agent).
  virtual std::string address() const = 0;
  // True until finish().
  virtual bool open() const = 0;
};

}  // namespace dtrain::controller

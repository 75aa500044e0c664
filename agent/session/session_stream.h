#pragma once

// The agent's end of a session, whichever side dialed: the launcher (AgentService.Session, agent --listen)
// or the agent (LauncherService.Join, agent --join). The agent's logic is written once against this.

#include "dtrain/v1/session.pb.h"

namespace dtrain::agent {

class SessionStream {
 public:
  virtual ~SessionStream() = default;
  // Blocks for the next launcher message; false once the stream ended, failed or was cancelled.
  virtual bool read(v1::LauncherMessage& message) = 0;
  // Only one thread writes at a time (the session outbox). False when the stream is broken.
  virtual bool write(const v1::AgentMessage& message) = 0;
  // Ends the stream from this side: a blocked read returns false.
  virtual void cancel() = 0;
  // Who is at the other end, for logs ("ipv4:127.0.0.1:50412").
  virtual std::string peer() const = 0;
};

}  // namespace dtrain::agent

#pragma once

// `dtrain agent --join`: the agent dials its launcher (LauncherService.Join, at the job's nodes.rendezvous) instead
// of waiting to be dialed, and serves the session the launcher opens on that call. Used where launchers cannot
// reach their agents but agents reach the launcher.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>

#include "agent/session/session_stream.h"
#include "common/status.h"
#include "common/transport.h"

namespace dtrain::agent {

struct JoinTarget {
  std::string launcher;                    // host:port the launcher's join server listens on
  std::chrono::milliseconds timeout{0};    // keep retrying the launcher this long
  Transport transport = Transport::tls;    // session_transport(launcher, --insecure)
  std::shared_ptr<grpc::ChannelCredentials> credentials;   // for `transport`
};

class JoinClient {
 public:
  // Serves one session to its end (Agent::serve_session).
  using Serve = std::function<Status(SessionStream&)>;

  JoinClient(JoinTarget target, Serve serve);

  // Dials the launcher (retrying until the target's timeout) and serves the session it opens. Ok after a clean
  // goodbye and when stop() came first; otherwise why there was no session, or why it ended.
  Status run();

  // From another thread: stop retrying (a session being served ends by its own means: Agent::terminate).
  void stop() { stopped_ = true; }

  // Whether the launcher accepted a session.
  bool joined() const { return joined_; }

 private:
  JoinTarget target_;
  Serve serve_;
  std::atomic<bool> stopped_ = false;
  std::atomic<bool> joined_ = false;
};

}  // namespace dtrain::agent

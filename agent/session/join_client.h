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

// How one session went: its end, and whether the launcher answered the agent's hello (sent Configure).
struct Served {
  Status status;
  bool answered = false;
};

class JoinClient {
 public:
  // Between an unanswered session's end and the next dial: a launcher that gives up agents it could not answer in
  // time (a join storm) is not dialed again at once by all of them.
  static constexpr std::chrono::milliseconds kRedialWait{1000};

  // Serves one session to its end (Agent::serve_session).
  using Serve = std::function<Served(SessionStream&)>;

  JoinClient(JoinTarget target, Serve serve);

  // Dials the launcher (retrying until the target's timeout) and serves the session it opens. Ok after a clean
  // goodbye and when stop() came first; otherwise why there was no session, or why it ended. A session that the
  // launcher ended (cancelled) before it answered the hello is not a job lost: nothing was started, so the agent
  // waits kRedialWait and dials again, as a new node, until the target's timeout. A refusal (the job is over, or
  // it has all its nodes) ends the run.
  Status run();

  // From another thread: stop retrying (a session being served ends by its own means: Agent::terminate).
  void stop() { stopped_ = true; }

  // Whether the launcher accepted a session (answered its hello).
  bool joined() const { return joined_; }

 private:
  JoinTarget target_;
  Serve serve_;
  std::atomic<bool> stopped_ = false;
  std::atomic<bool> joined_ = false;
};

}  // namespace dtrain::agent

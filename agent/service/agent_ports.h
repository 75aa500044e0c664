#pragma once

// What the agent's services ask of the agent, and no more: SessionService and ReportService hold these, not the
// Agent, so that service/ never includes agent/agent.h (the agent includes service/, never the other way round).
// Agent implements both (agent.h).

#include <cstdint>
#include <string>

#include "common/status.h"

namespace dtrain::v1 {
class WorkerHealth;
}  // namespace dtrain::v1

namespace dtrain::agent {

class SessionStream;

// Serves a session a service carried in, to its end (Agent::serve_session). `answered`, when not null, is set to
// whether the launcher answered the hello.
class SessionHost {
 public:
  virtual Status serve_session(SessionStream& stream, bool* answered) = 0;

 protected:
  ~SessionHost() = default;
};

// Judges and forwards a worker's health report (Agent::check_reporter, Agent::forward_report).
class ReportSink {
 public:
  virtual Status check_reporter(const std::string& token, const std::string& report_token,
                                std::uint32_t rank) const = 0;
  virtual void forward_report(const v1::WorkerHealth& health) = 0;

 protected:
  ~ReportSink() = default;
};

}  // namespace dtrain::agent

// Agent::check_reporter before the agent has a job runner: a health report that arrives while the agent is still
// starting is refused as unavailable (no round exists yet to tie it to), not as a forged reporter. The token and
// report-token checks of a running agent are in agent_job_runner_test.cpp and the health_report integration test.
#include <doctest/doctest.h>

#include "agent/agent.h"

TEST_CASE("a report that arrives while the agent is still starting is refused as unavailable") {
  const dtrain::agent::Agent agent{dtrain::agent::AgentOptions{}};
  const dtrain::Status refused = agent.check_reporter("round-token", "report-token", 0);
  CHECK(refused.code() == dtrain::StatusCode::unavailable);
  CHECK(refused.message() == "the agent is still starting");
}

// dtrain-trainer's own dump (trainer/health/stack_dump.h) as the agent reads it for the evidence of a hang: the
// phase line, the trace's header and the oldest unfinished collective as top frames, and where the communicator
// stood. The end-to-end case (a real trainer dumping on the agent's signal) is tests/integration/test_health_timeouts.
#include <doctest/doctest.h>

#include <string>

#include "agent/job/evidence.h"

using dtrain::agent::collective_state;
using dtrain::agent::trainer_top_frames;

namespace {

const std::string kDump =
    "dtrain-trainer pid 4242: phase \"reduce\"\n"
    "collectives of gloo communicator: issued 12, started 11, finished 10\n"
    "#9 broadcast of 1 floats from rank 0: issued at 1.000 s, started at 1.000 s, finished at 1.001 s\n"
    "#10 allreduce of 1 floats: issued at 2.000 s, started at 2.000 s, finished at 2.001 s\n"
    "#11 allreduce of 262144 floats: issued at 3.000 s, started at 3.000 s, not finished\n"
    "#12 allreduce of 131072 floats: issued at 3.100 s, not started\n";

}  // namespace

TEST_CASE("a trainer dump gives its phase, its trace header and the collective it waits in") {
  const auto frames = trainer_top_frames(kDump);
  REQUIRE(frames.size() == 3);
  CHECK(frames[0] == "dtrain-trainer pid 4242: phase \"reduce\"");
  CHECK(frames[1] == "collectives of gloo communicator: issued 12, started 11, finished 10");
  CHECK(frames[2] == "#11 allreduce of 262144 floats: issued at 3.000 s, started at 3.000 s, not finished");
  const auto state = collective_state(kDump);
  REQUIRE(state.has_value());
  CHECK(state->issued == 12);
  CHECK(state->started == 11);
  CHECK(state->finished == 10);
  CHECK(state->pending == "allreduce of 262144 floats");
}

TEST_CASE("the last of several appended dumps counts; other text is not a trainer dump") {
  const std::string later = "dtrain-trainer pid 4242: phase \"optimizer\"\n"
                            "collectives of gloo communicator: issued 14, started 14, finished 14\n"
                            "#14 allreduce of 1 floats: issued at 4.000 s, started at 4.000 s, finished at 4.001 s\n";
  const auto state = collective_state(kDump + later);
  REQUIRE(state.has_value());
  CHECK(state->finished == 14);
  CHECK(state->pending.empty());
  CHECK(trainer_top_frames(kDump + later).size() == 2);
  CHECK(trainer_top_frames("Thread 0x7f (most recent call first):\n  File \"x.py\", line 3 in f\n").empty());
  CHECK_FALSE(collective_state("dtrain-trainer pid 1: phase \"data\"\n").has_value());
  CHECK_FALSE(collective_state("").has_value());
}

// explain_collective_hang (cli/controller/diagnose/collective_hang.h): from every rank's collective trace, the collective the
// job waits in, the ranks that never entered it and those waiting in it.
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>

#include "cli/controller/diagnose/collective_hang.h"

using dtrain::controller::CollectiveState;
using dtrain::controller::describe_ranks;
using dtrain::controller::explain_collective_hang;
using dtrain::controller::RankStacks;

namespace {

RankStacks traced(unsigned rank, std::uint64_t issued, std::uint64_t started, std::uint64_t finished,
                  std::string pending = "") {
  RankStacks s;
  s.rank = rank;
  s.collectives = CollectiveState{issued, started, finished, std::move(pending)};
  return s;
}

}  // namespace

TEST_CASE("ranks are described as runs") {
  CHECK(describe_ranks({3}) == "3");
  CHECK(describe_ranks({0, 1, 2, 4, 5, 6, 7}) == "0-2 and 4-7");
  CHECK(describe_ranks({0, 2, 5}) == "0, 2 and 5");
  CHECK(describe_ranks({1, 2}) == "1-2");
}

TEST_CASE("the rank that never entered the collective the others wait in is named") {
  std::map<unsigned, RankStacks> stacks;
  for (unsigned r = 0; r < 8; ++r) stacks[r] = traced(r, 1842, 1842, 1841, "allreduce of 262144 floats");
  stacks[3] = traced(3, 1841, 1841, 1841);
  CHECK(explain_collective_hang(stacks) ==
        "collective #1842 (allreduce of 262144 floats): rank 3 never entered it; ranks 0-2 and 4-7 are waiting in it");
}

TEST_CASE("ranks ahead with queued collectives, and ranks that issued but had not started it") {
  std::map<unsigned, RankStacks> stacks;
  stacks[0] = traced(0, 12, 10, 9, "allreduce of 4 floats");   // issued 10-12, waits in 10
  stacks[1] = traced(1, 11, 9, 9, "allreduce of 4 floats");    // issued 10, not started
  stacks[2] = traced(2, 9, 9, 9);
  CHECK(explain_collective_hang(stacks) == "collective #10 (allreduce of 4 floats): rank 2 never entered it; rank 0 "
                                           "is waiting in it; rank 1 issued it but had not started it");
}

TEST_CASE("every rank finished what it issued: the hang is elsewhere; too few traces say nothing") {
  std::map<unsigned, RankStacks> stacks;
  stacks[0] = traced(0, 40, 40, 40);
  stacks[1] = traced(1, 40, 40, 40);
  stacks[2].rank = 2;   // no trace: left out
  CHECK(explain_collective_hang(stacks) ==
        "every rank with a collective trace (ranks 0-1) finished all 40 collectives it issued: the hang is outside "
        "communication");
  stacks.erase(1);
  CHECK(explain_collective_hang(stacks) == std::nullopt);
  CHECK(explain_collective_hang({}) == std::nullopt);
}

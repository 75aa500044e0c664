#pragma once

// Which rank a hung collective waits for, from every rank's collective trace (CollectiveState, dumped by
// dtrain-trainer when the launcher collects the evidence of a hang), as PyTorch's flight recorder analysis does:
// ranks number their collectives alike, so the first collective some rank did not finish is where the job stands;
// a rank that has not even issued it never entered it, and the ranks that did are waiting in it.
//
//   collective #1842 (allreduce of 262144 floats): rank 3 never entered it; ranks 0-2 and 4-7 are waiting in it
//
// Ranks without a trace are left out; a job whose traced ranks all finished everything they issued, all alike,
// hangs outside its collectives, and the explanation says so.

#include <map>
#include <optional>
#include <string>

#include "cli/controller/session/session_messages.h"

namespace dtrain::controller {

// The explanation, or nothing when fewer than two ranks have a trace (nothing to compare).
std::optional<std::string> explain_collective_hang(const std::map<unsigned, RankStacks>& stacks);

// "0-2 and 4-7", "3", "0, 2 and 5": ranks in increasing order, runs joined.
std::string describe_ranks(const std::vector<unsigned>& ranks);

}  // namespace dtrain::controller

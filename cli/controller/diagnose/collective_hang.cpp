#include "cli/controller/diagnose/collective_hang.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace dtrain::controller {

std::string describe_ranks(const std::vector<unsigned>& ranks) {
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    runs.push_back(j == i ? std::to_string(ranks[i]) : std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
    i = j + 1;
  }
  std::string out;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    if (k > 0) out += k + 1 == runs.size() ? " and " : ", ";
    out += runs[k];
  }
  return out;
}

namespace {

std::string ranks_phrase(const std::vector<unsigned>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + describe_ranks(ranks);
}

}  // namespace

std::optional<std::string> explain_collective_hang(const std::map<unsigned, RankStacks>& stacks) {
  std::map<unsigned, CollectiveState> traced;
  for (const auto& [rank, s] : stacks)
    if (s.collectives) traced[rank] = *s.collectives;
  if (traced.size() < 2) return std::nullopt;
  // The first collective some rank did not finish.
  std::uint64_t n = std::numeric_limits<std::uint64_t>::max();
  for (const auto& [rank, c] : traced) n = std::min(n, c.finished + 1);
  std::vector<unsigned> absent, waiting, queued;
  std::string what;
  for (const auto& [rank, c] : traced) {
    if (c.issued < n) {
      absent.push_back(rank);
    } else if (c.finished < n) {
      (c.started >= n ? waiting : queued).push_back(rank);
      if (what.empty() && c.finished + 1 == n) what = c.pending;
    }
  }
  if (waiting.empty() && queued.empty()) {
    return "every rank with a collective trace (" + ranks_phrase(absent) + ") finished all " +
           std::to_string(n - 1) + " collectives it issued: the hang is outside communication";
  }
  std::string out = "collective #" + std::to_string(n) + (what.empty() ? "" : " (" + what + ")") + ": ";
  if (!absent.empty()) out += ranks_phrase(absent) + " never entered it; ";
  if (!waiting.empty()) out += ranks_phrase(waiting) + (waiting.size() == 1 ? " is" : " are") + " waiting in it";
  if (!queued.empty()) {
    if (!waiting.empty()) out += "; ";
    out += ranks_phrase(queued) + " issued it but had not started it";
  }
  return out;
}

}  // namespace dtrain::controller

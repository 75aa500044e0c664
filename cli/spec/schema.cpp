#include "cli/spec/schema.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>

namespace dtrain::spec::detail {
namespace {

using Keys = std::vector<std::string_view>;

const std::map<std::string_view, Keys>& sections() {
  static const std::map<std::string_view, Keys> table = {
      {"", {"name", "nodes", "workers_per_node", "command", "shell", "env", "working_dir", "restart", "stop",
            "health", "logs", "nccl", "binding", "gpu_isolation", "observe"}},
      {"nodes", {"provider", "count", "agents", "hosts", "rendezvous", "interface", "join_timeout_s", "ssh_command",
                 "srun_command", "remote_dtrain", "topology"}},
      {"restart", {"max_restarts", "backoff_s"}},
      {"stop", {"grace_s"}},
      {"health", {"heartbeat_timeout_s", "hang_timeout_s", "startup_timeout_s", "exit_timeout_s",
                  "node_timeout_s", "straggler_ratio", "instrument"}},
      {"logs", {"dir", "console"}},
      {"nccl", {"auto", "env"}},
      {"observe", {"metrics_addr"}},
  };
  return table;
}

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("cuont" -> "count" is 1).
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (lower(text[i]) != lower(prefix[i])) return false;
  }
  return true;
}

}  // namespace

const std::vector<std::string_view>& allowed_keys(std::string_view section) {
  static const Keys none;
  const auto it = sections().find(section);
  return it == sections().end() ? none : it->second;
}

bool is_section(std::string_view path) { return !path.empty() && sections().count(path) > 0; }

bool is_free_map(std::string_view path) { return path == "env" || path == "nccl.env"; }

std::string closest(std::string_view word, const std::vector<std::string_view>& candidates) {
  // Up to two edits for short words, a third of the word for long ones: close enough to be a typo, far enough
  // that unrelated words are not suggested.
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto candidate : candidates) {
    std::size_t distance = edit_distance(word, candidate);
    // "grace" for "grace_s", "heartbeat" for "heartbeat_timeout_s": a clear prefix counts as a near miss.
    if (word.size() >= 3 && (starts_with_nocase(candidate, word) || starts_with_nocase(word, candidate))) {
      distance = std::min<std::size_t>(distance, 1);
    }
    if (distance <= limit && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string join(const std::vector<std::string_view>& words, std::string_view separator) {
  std::string out;
  for (const auto word : words) {
    if (!out.empty()) out += separator;
    out += word;
  }
  return out;
}

std::string child_path(std::string_view section, std::string_view key) {
  std::string out(section);
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

std::string unknown_key_hint(std::string_view section, std::string_view key) {
  const Keys& here = allowed_keys(section);
  std::string suggestion;
  if (const std::string near = closest(key, here); !near.empty()) {
    suggestion = child_path(section, near);
  } else {
    for (const auto& [other, keys] : sections()) {
      if (other == section) continue;
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
        suggestion = child_path(other, key);
        break;
      }
    }
  }
  std::string hint;
  if (!suggestion.empty()) hint = "Did you mean '" + suggestion + "'? ";
  hint += section.empty() ? std::string("Allowed top-level keys: ")
                          : "Allowed keys under " + std::string(section) + ": ";
  hint += join(here);
  return hint;
}

}  // namespace dtrain::spec::detail

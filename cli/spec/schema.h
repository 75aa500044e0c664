#pragma once

// The shape of a job spec (which keys exist at which level) and the did-you-mean search used by every message
// that names a key or a value. Shared by the YAML reader and the `--set` overrides, so both say the same thing.

#include <string>
#include <string_view>
#include <vector>

namespace dtrain::spec::detail {

// Keys allowed directly under `section` ("" = top level, "nodes", "restart", ...), in documentation order.
// Empty for anything that is not a section.
const std::vector<std::string_view>& allowed_keys(std::string_view section);

// Sections: mappings with a fixed set of keys.
bool is_section(std::string_view path);

// Mappings whose keys are the user's own (environment variable names): "env", "nccl.env".
bool is_free_map(std::string_view path);

// The candidate closest to `word` (case-insensitive edit distance with transpositions, or a prefix of it),
// or "" when none is close enough to be what was meant.
std::string closest(std::string_view word, const std::vector<std::string_view>& candidates);

// "a, b, c"
std::string join(const std::vector<std::string_view>& words, std::string_view separator = ", ");

// "section.key", or "key" at the top level.
std::string child_path(std::string_view section, std::string_view key);

// The hint for an unknown key `key` under `section`:
//   "Did you mean 'nodes.count'? Allowed keys under nodes: provider, count, agents, interface, join_timeout_s"
// The suggestion is the closest key at the same level, else the same key in another section (grace_s written at
// the top level suggests 'stop.grace_s').
std::string unknown_key_hint(std::string_view section, std::string_view key);

}  // namespace dtrain::spec::detail

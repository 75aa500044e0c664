#pragma once

// Where each key of a spec was written, so that checks made on the parsed Spec (validate) can still point at the
// line and column of the value they complain about. A Spec built in code has no locations: its diagnostics name
// only the source and the key.

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli/spec/spec.h"

namespace dtrain::spec::detail {

struct Position {
  int line = 0;    // 1-based; 0 = unknown
  int column = 0;  // 1-based; 0 = unknown
};

class Locations {
 public:
  explicit Locations(std::string file) : file_(std::move(file)) {}

  // `path` is a dotted key path: "nodes.count", "nodes.agents[1]", "env.FOO".
  void set_value(const std::string& path, Position at) { values_[path] = at; }
  void set_key(const std::string& path, Position at) { keys_[path] = at; }
  void add_override(std::string path) { overrides_.push_back(std::move(path)); }

  // A key that already has a diagnostic; checks on it, its parents' other rules and its children are skipped so
  // one mistake gives one message.
  void mark_broken(std::string path) { broken_.insert(std::move(path)); }
  bool is_broken(std::string_view path) const;

  // A diagnostic about `path`: at its value if it was written, else at the section it belongs in. A key that a
  // `--set` override supplied is reported against "--set".
  Diagnostic at(const std::string& path, std::string message, std::string hint = "") const;

  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::map<std::string, Position> values_, keys_;
  std::vector<std::string> overrides_;
  std::set<std::string, std::less<>> broken_;
};

// True when `path` is `prefix` or lies under it ("nodes.count" and "nodes.agents[0]" lie under "nodes").
bool path_within(std::string_view path, std::string_view prefix);

// The semantic checks of validate(), reporting through `where`.
void check_spec(const Spec& spec, const Locations& where, std::vector<Diagnostic>& out);

// Sorts by position (unpositioned last, in the order found) and throws SpecError when there is anything to report.
void throw_if_any(std::vector<Diagnostic> diagnostics);

}  // namespace dtrain::spec::detail

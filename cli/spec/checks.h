#pragma once

// The pieces of check_spec (validate.cpp): a Reporter that every rule reports through, and the rules too long to
// share its file. Each rule reads the Spec and reports at the key it is about.

#include <string>
#include <string_view>
#include <vector>

#include "cli/spec/locations.h"
#include "cli/spec/spec.h"

namespace dtrain::spec::detail {

// Reports a broken rule at a key, once: a key that already has a diagnostic (from the reader) is not reported
// again.
class Reporter {
 public:
  Reporter(const Locations& where, std::vector<Diagnostic>& out) : where_(where), out_(out) {}

  void report(const std::string& path, std::string message, std::string hint = "");

  // A number of seconds, 0 (off, where 0 is allowed) to kMaxDurationS.
  void duration(const std::string& path, double value, bool zero_ok = true);
  // A number of seconds from `least` (> 0; a smaller value would fail every job, for the reason `why`) to
  // kMaxDurationS.
  void duration_from(const std::string& path, double value, double least, const std::string& why);

  // exec and the environment take C strings: a NUL would silently cut the value, so it is refused. Returns whether
  // `value` has none.
  bool no_nul(const std::string& path, const std::string& value);
  void no_nul(const std::string& path, const std::vector<std::string>& values);

  bool is_broken(std::string_view path) const { return where_.is_broken(path); }

 private:
  const Locations& where_;
  std::vector<Diagnostic>& out_;
};

// nodes: the count, the provider's own keys (agents, hosts, rendezvous, ssh and srun commands), the interface.
void check_nodes(const Spec& spec, Reporter& reporter);

}  // namespace dtrain::spec::detail

#pragma once

// Typed values out of YAML nodes: strings, integers, seconds, booleans, one of a fixed set, lists and variable
// maps, and the walk over a mapping's keys that refuses unknown and repeated ones. Each problem is reported once, at
// the value's position, and its key is marked broken so that check_spec does not report it again. The sections of
// a spec (reader.cpp) are read with these.

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cli/spec/locations.h"
#include "cli/spec/schema.h"

namespace dtrain::spec::detail {

// What a node holds, for "expected X, got Y" messages.
std::string describe(const YAML::Node& node);

// An int written in decimal, with an optional leading '+'; std::nullopt for anything else or out of range.
std::optional<int> parse_int(std::string_view text);

template <class T>
using Choices = std::vector<std::pair<std::string_view, T>>;

class ValueReader {
 public:
  ValueReader(Locations& where, std::vector<Diagnostic>& out) : where_(where), out_(out) {}

  // Reports a problem with the value at `path` and marks it broken.
  void error(const std::string& path, std::string message, std::string hint = "");

  using Visit = std::function<void(const std::string& key, const std::string& path, const YAML::Node& value)>;

  // Calls visit(key, path, value) for each entry of the mapping `section_node` at `section`, after recording where
  // it was written. Unknown keys (outside env maps), repeated keys and non-string keys are reported instead.
  void each_entry(const YAML::Node& section_node, const std::string& section, const Visit& visit);

  // A section may be written empty ("restart:") and then keeps its defaults.
  bool section(const YAML::Node& node, const std::string& path);

  bool scalar(const YAML::Node& node, const std::string& path, std::string_view expected, std::string hint = "");

  void read_string(const YAML::Node& node, const std::string& path, std::string& out);
  bool read_int(const YAML::Node& node, const std::string& path, int& out);
  // A finite number; `expected` names it in messages ("a number of seconds" for a duration).
  void read_number(const YAML::Node& node, const std::string& path, double& out,
                   std::string_view expected = "a number of seconds");
  void read_bool(const YAML::Node& node, const std::string& path, bool& out);
  void read_string_map(const YAML::Node& node, const std::string& path, std::map<std::string, std::string>& out);
  void read_string_list(const YAML::Node& node, const std::string& path, std::vector<std::string>& out,
                        const std::string& example);

  template <class T>
  void read_choice(const YAML::Node& node, const std::string& path, const Choices<T>& choices, T& out) {
    std::vector<std::string_view> names;
    for (const auto& [name, value] : choices) names.push_back(name);
    std::string expected = join(std::vector(names.begin(), names.end() - 1)) + " or " + std::string(names.back());
    if (!scalar(node, path, expected)) return;
    for (const auto& [name, value] : choices) {
      if (node.Scalar() == name) {
        out = value;
        return;
      }
    }
    const std::string near = closest(node.Scalar(), names);
    error(path, "expected " + expected + ", got " + describe(node) + ".",
          near.empty() ? "" : "Did you mean '" + near + "'?");
  }

  // Whether an unknown top-level key was answered with a did-you-mean for `key`.
  bool suggested(const std::string& key) const { return suggested_.count(key) != 0; }

 protected:
  Locations& where_;

 private:
  std::vector<Diagnostic>& out_;
  std::set<std::string> suggested_;  // top-level keys offered as did-you-mean
};

}  // namespace dtrain::spec::detail

#include "cli/spec/value_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "cli/spec/reader.h"

namespace dtrain::spec::detail {
namespace {

std::optional<long long> parse_integer(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: {
      std::string text = node.Scalar();
      if (text.size() > 40) text = text.substr(0, 37) + "...";
      return "'" + text + "'";
    }
    default: return "nothing";
  }
}

std::optional<int> parse_int(std::string_view text) {
  const auto value = parse_integer(text);
  if (!value || *value < std::numeric_limits<int>::min() || *value > std::numeric_limits<int>::max()) {
    return std::nullopt;
  }
  return static_cast<int>(*value);
}

void ValueReader::error(const std::string& path, std::string message, std::string hint) {
  out_.push_back(where_.at(path, std::move(message), std::move(hint)));
  where_.mark_broken(path);
}

void ValueReader::each_entry(const YAML::Node& section_node, const std::string& section, const Visit& visit) {
  std::set<std::string> seen;
  for (auto it = section_node.begin(); it != section_node.end(); ++it) {
    const YAML::Node key_node = it->first;  // copies: the iterator hands out a temporary pair
    const YAML::Node value = it->second;
    if (!key_node.IsScalar()) {
      where_.set_value(section + "[key]", position_of(key_node.Mark()));
      error(section + "[key]", "keys must be plain names, got " + describe(key_node) + ".");
      continue;
    }
    const std::string key = key_node.Scalar();
    const std::string path = child_path(section, key);
    const Position key_at = position_of(key_node.Mark());
    if (!seen.insert(key).second) {
      where_.set_value(path, key_at);
      error(path, "repeated key; each key may appear once.", "Remove one of them.");
      continue;
    }
    where_.set_key(path, key_at);
    const bool free = is_free_map(section);
    if (!free) {
      const auto& allowed = allowed_keys(section);
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        where_.set_value(path, key_at);
        error(path, "unknown key.", unknown_key_hint(section, key));
        if (section.empty()) suggested_.insert(closest(key, allowed));
        continue;
      }
    }
    // A variable is named by its key; an empty value has no position of its own.
    const Position value_at = position_of(value.Mark());
    where_.set_value(path, free || value_at.line == 0 ? key_at : value_at);
    visit(key, path, value);
  }
}

bool ValueReader::section(const YAML::Node& node, const std::string& path) {
  if (node.IsMap() || node.IsNull()) return true;
  error(path, "expected a mapping, got " + describe(node) + ".",
        "Keys under " + path + ": " + join(allowed_keys(path)) + ".");
  return false;
}

bool ValueReader::scalar(const YAML::Node& node, const std::string& path, std::string_view expected,
                         std::string hint) {
  if (node.IsScalar()) return true;
  error(path, "expected " + std::string(expected) + ", got " + describe(node) + ".", std::move(hint));
  return false;
}

void ValueReader::read_string(const YAML::Node& node, const std::string& path, std::string& out) {
  if (scalar(node, path, "a string")) out = node.Scalar();
}

bool ValueReader::read_int(const YAML::Node& node, const std::string& path, int& out) {
  if (!scalar(node, path, "an integer")) return false;
  const auto value = parse_int(node.Scalar());
  if (!value) {
    error(path, "expected an integer, got " + describe(node) + ".");
    return false;
  }
  out = *value;
  return true;
}

void ValueReader::read_number(const YAML::Node& node, const std::string& path, double& out,
                              std::string_view expected) {
  if (!scalar(node, path, expected)) return;
  const auto value = parse_number(node.Scalar());
  if (value) {
    out = *value;
    return;
  }
  // YAML writes NaN and infinity as .nan and .inf; a number that is not finite is never a setting.
  std::string lower = node.Scalar();
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.starts_with('+') || lower.starts_with('-')) lower.erase(0, 1);
  const char* why = lower == ".nan" || lower == "nan" ? " (not a number)"
                    : lower == ".inf" || lower == "inf" || lower == "infinity" ? " (infinite)"
                                                                                 : "";
  error(path, "expected " + std::string(expected) + ", got " + describe(node) + why + ".");
}

void ValueReader::read_bool(const YAML::Node& node, const std::string& path, bool& out) {
  if (!scalar(node, path, "true or false")) return;
  const std::string& text = node.Scalar();
  if (text == "true" || text == "True" || text == "TRUE") out = true;
  else if (text == "false" || text == "False" || text == "FALSE") out = false;
  else error(path, "expected true or false, got " + describe(node) + ".");
}

void ValueReader::read_string_map(const YAML::Node& node, const std::string& path,
                                  std::map<std::string, std::string>& out) {
  if (!node.IsMap() && !node.IsNull()) {
    return error(path, "expected a mapping of variable names to values, got " + describe(node) + ".",
                 "Example: " + path + ": {NCCL_DEBUG: INFO}");
  }
  each_entry(node, path, [&](const std::string& key, const std::string& var_path, const YAML::Node& value) {
    if (value.IsNull()) {
      return error(var_path, "expected a string, got nothing.", "Write " + key + ": \"\" for an empty value.");
    }
    if (scalar(value, var_path, "a string")) out[key] = value.Scalar();
  });
}

void ValueReader::read_string_list(const YAML::Node& node, const std::string& path, std::vector<std::string>& out,
                                   const std::string& example) {
  if (!node.IsSequence()) return error(path, "expected a list, got " + describe(node) + ".", example);
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    where_.set_value(item_path, position_of(node[i].Mark()));
    std::string item;
    read_string(node[i], item_path, item);
    out.push_back(item);
  }
}

}  // namespace dtrain::spec::detail

// `--set key.path=value`: edits the YAML document before it is read, so an override is checked exactly like the
// same value written in the file. The path is checked against the schema first, so a typo is reported with its
// did-you-mean instead of silently adding a key.

#include <algorithm>
#include <optional>

#include "cli/spec/reader.h"
#include "cli/spec/schema.h"

namespace dtrain::spec::detail {
namespace {

constexpr std::string_view kExample = "Examples: --set nodes.count=4, --set command=[python3,train.py], "
                                      "--set env.NCCL_DEBUG=INFO";

Diagnostic override_error(std::string key, std::string message, std::string hint) {
  Diagnostic d;
  d.file = "--set";
  d.key = std::move(key);
  d.message = std::move(message);
  d.hint = std::move(hint);
  return d;
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

// Checks `parts` against the schema; returns the diagnostic for the first bad segment, if any.
std::optional<Diagnostic> check_path(const std::vector<std::string>& parts) {
  std::string section;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const std::string path = child_path(section, part);
    const bool last = i + 1 == parts.size();
    if (is_free_map(section)) {
      if (!last) {
        return override_error(path, "is an environment variable; it has no keys under it.",
                              "Write --set " + path + "=value.");
      }
      return std::nullopt;
    }
    const auto& allowed = allowed_keys(section);
    if (std::find(allowed.begin(), allowed.end(), part) == allowed.end()) {
      return override_error(path, "unknown key.", unknown_key_hint(section, part));
    }
    if (!last && !is_section(path) && !is_free_map(path)) {
      return override_error(child_path(path, parts[i + 1]), path + " takes a value, not keys.",
                            "Write --set " + path + "=value.");
    }
    section = path;
  }
  return std::nullopt;
}

}  // namespace

void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, Locations& where,
                     std::vector<Diagnostic>& out) {
  for (const auto& arg : overrides) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos) {
      out.push_back(override_error("", "expected key.path=value, got '" + arg + "'.", std::string(kExample)));
      continue;
    }
    const std::string path = arg.substr(0, eq);
    const std::string text = arg.substr(eq + 1);
    const auto parts = split_path(path);
    if (std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); })) {
      out.push_back(override_error(path, "is not a key path.", std::string(kExample)));
      continue;
    }
    if (auto bad = check_path(parts)) {
      out.push_back(std::move(*bad));
      continue;
    }
    // The value is YAML, so lists and mappings can be given inline; an empty value is the empty string.
    YAML::Node value;
    if (text.empty()) {
      value = YAML::Node(std::string());
    } else {
      try {
        value = YAML::Load(text);
      } catch (const YAML::Exception& e) {
        out.push_back(override_error(path, "cannot read '" + text + "' as a YAML value: " + e.msg + ".",
                                     "Quote it for the shell, e.g. --set '" + path + "=[a, b]'."));
        continue;
      }
    }
    if (root.IsNull() || !root.IsDefined()) root.reset(YAML::Node(YAML::NodeType::Map));
    if (!root.IsMap()) continue;  // the reader reports a document that is not a mapping
    YAML::Node section = root;
    std::string prefix;
    bool placed = true;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix = child_path(prefix, parts[i]);
      YAML::Node child = section[parts[i]];
      if (!child.IsDefined() || child.IsNull()) {
        section[parts[i]] = YAML::Node(YAML::NodeType::Map);
        child.reset(section[parts[i]]);
      } else if (!child.IsMap()) {
        out.push_back(override_error(path, "cannot be set: " + prefix + " in " + where.file() +
                                               " is not a mapping.", "Fix " + prefix + " in the file first."));
        placed = false;
        break;
      }
      section.reset(child);
    }
    if (!placed) continue;
    section[parts.back()] = value;
    where.add_override(path);
  }
}

}  // namespace dtrain::spec::detail

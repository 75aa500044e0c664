#include <algorithm>

#include "cli/spec/locations.h"
#include "cli/spec/spec.h"
#include "common/io/terminal_text.h"

namespace dtrain::spec {

std::string Diagnostic::format() const {
  std::string out = file;
  if (!file.empty() && line > 0) {
    out += ':' + std::to_string(line);
    if (column > 0) out += ':' + std::to_string(column);
  }
  if (!out.empty()) out += ": ";
  if (!key.empty()) out += key + ": ";
  out += message;
  if (!hint.empty()) out += ' ' + hint;
  // Keys and values come from the file: a NUL would cut the message where it is printed, an ESC would act on the
  // terminal.
  return terminal_safe(out);
}

const char* SpecError::what() const noexcept {
  try {
    what_.clear();
    for (const auto& d : diagnostics) {
      if (!what_.empty()) what_ += '\n';
      what_ += d.format();
    }
    if (what_.empty()) what_ = "invalid job spec";
    return what_.c_str();
  } catch (...) {
    return "invalid job spec";
  }
}

namespace detail {

bool path_within(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return false;
  if (path.size() == prefix.size()) return true;
  const char next = path[prefix.size()];
  return next == '.' || next == '[';
}

bool Locations::is_broken(std::string_view path) const {
  if (broken_.count("")) return true;  // the document itself was unreadable: nothing else is worth reporting
  for (const auto& b : broken_) {
    if (path_within(path, b) || path_within(b, path)) return true;
  }
  return false;
}

Diagnostic Locations::at(const std::string& path, std::string message, std::string hint) const {
  Diagnostic d;
  d.key = path;
  d.message = std::move(message);
  d.hint = std::move(hint);
  for (const auto& o : overrides_) {
    if (path_within(path, o)) {
      d.file = "--set";
      return d;
    }
  }
  d.file = file_;
  if (const auto it = values_.find(path); it != values_.end()) {
    d.line = it->second.line;
    d.column = it->second.column;
    return d;
  }
  // Not written: point at the nearest enclosing key that was ("nodes:" for a missing nodes.agents).
  std::string parent = path;
  while (true) {
    const auto cut = parent.find_last_of(".[");
    if (cut == std::string::npos) break;
    parent.resize(cut);
    if (const auto it = keys_.find(parent); it != keys_.end()) {
      d.line = it->second.line;
      d.column = it->second.column;
      break;
    }
  }
  return d;
}

void throw_if_any(std::vector<Diagnostic> diagnostics) {
  if (diagnostics.empty()) return;
  std::stable_sort(diagnostics.begin(), diagnostics.end(), [](const Diagnostic& a, const Diagnostic& b) {
    const bool a_known = a.line > 0, b_known = b.line > 0;
    if (a_known != b_known) return a_known;
    if (a.line != b.line) return a.line < b.line;
    return a.column < b.column;
  });
  throw SpecError(std::move(diagnostics));
}

}  // namespace detail
}  // namespace dtrain::spec

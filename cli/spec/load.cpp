// Loading a spec: read the text, parse the YAML, apply `--set` overrides, read the document, check the values.
// Every stage adds to one list of diagnostics, so the user sees every problem at once.

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "cli/spec/locations.h"
#include "cli/spec/reader.h"
#include "cli/spec/spec.h"
#include "cli/spec/yaml_documents.h"
#include "common/io/bounded_file.h"

namespace dtrain::spec {
namespace {

// A spec is a page of YAML; anything this large is the wrong file.
constexpr std::size_t kMaxSpecBytes = 1 << 20;
// What a spec may expand to once every alias (*name) is replaced by its anchor's text. yaml-cpp shares an anchored
// node among its aliases, but reading a spec copies each use: 6,000 aliases of a 100 KB value are 600 MB in a
// 171 KB file. A spec written out in full is at most kMaxSpecBytes; four times that leaves aliases their use (one
// block of settings shared by several keys) and stops an expansion before it costs memory.
constexpr std::size_t kMaxExpandedBytes = 4 * kMaxSpecBytes;

[[noreturn]] void fail(Diagnostic d) { throw SpecError({std::move(d)}); }

Diagnostic file_problem(const std::string& file, std::string message, std::string hint = "") {
  Diagnostic d;
  d.file = file;
  d.message = std::move(message);
  d.hint = std::move(hint);
  return d;
}

// yaml-cpp 0.7 (Debian 12) never returns from LoadAll on some text: a ',' where a document starts yields an empty
// document without consuming the ',', forever, until memory runs out. Walking the documents first and stopping
// where one starts at the same place as the one before turns that into a syntax error. Throws YAML::Exception for
// the errors yaml-cpp reports itself.
void check_documents_advance(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    const auto& marks = starts.marks;
    if (marks.size() < 2 || marks[marks.size() - 1].pos != marks[marks.size() - 2].pos) continue;
    const YAML::Mark at = marks.back();
    const auto position = detail::position_of(at);
    const char c = at.pos >= 0 && static_cast<std::size_t>(at.pos) < text.size() ? text[at.pos] : '?';
    Diagnostic d = file_problem(file, std::string("invalid YAML: '") + c + "' cannot start a document.");
    d.line = position.line;
    d.column = position.column;
    d.hint = "Check the indentation and quoting here and on the line before.";
    fail(std::move(d));
  }
}

// Takes what `node` expands to (an alias's target once per use) out of `left`; false, with `at` set to the node
// being expanded, when that is more than `left`. Every node costs a byte beyond its text, so aliases of empty lists
// nested into one another (the "billion laughs") run out too; the walk stops there, so it is as cheap as the budget.
bool expand_within(const YAML::Node& node, std::size_t& left, YAML::Mark& at) {
  const std::size_t cost = 1 + (node.IsScalar() ? node.Scalar().size() : 0);
  if (cost > left) {
    at = node.Mark();
    return false;
  }
  left -= cost;
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!expand_within(it->first, left, at) || !expand_within(it->second, left, at)) return false;
    }
  } else if (node.IsSequence()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!expand_within(*it, left, at)) return false;
    }
  }
  return true;
}

void check_expanded_size(const YAML::Node& root, const std::string& file) {
  std::size_t left = kMaxExpandedBytes;
  YAML::Mark at = YAML::Mark::null_mark();
  if (expand_within(root, left, at)) return;
  Diagnostic d = file_problem(file, "the spec expands to more than " + std::to_string(kMaxExpandedBytes) +
                                        " bytes once its aliases (*name) are replaced by their anchors' values.");
  if (!at.is_null()) {
    const auto position = detail::position_of(at);
    d.line = position.line;
    d.column = position.column;
    d.message += " The value here is repeated too often.";
  }
  d.hint = "Use an alias for a small shared value, not to repeat a large one many times.";
  fail(std::move(d));
}

}  // namespace

std::string_view to_string(Provider provider) {
  switch (provider) {
    case Provider::local: return "local";
    case Provider::static_list: return "static";
    case Provider::ssh: return "ssh";
    case Provider::slurm: return "slurm";
    case Provider::join: return "join";
  }
  return "?";
}

std::string_view to_string(Binding binding) { return binding == Binding::automatic ? "auto" : "none"; }

Spec load_spec_string(std::string_view yaml, std::string_view source, const std::vector<std::string>& overrides) {
  const std::string file(source);
  YAML::Node root;
  try {
    check_documents_advance(std::string(yaml), file);
    const auto documents = YAML::LoadAll(std::string(yaml));
    if (documents.size() > 1) {
      const auto at = detail::position_of(documents[1].Mark());
      Diagnostic d = file_problem(file, "a spec is one YAML document, this file has " +
                                            std::to_string(documents.size()) + ".");
      d.line = at.line;
      d.column = at.column;
      d.hint = "Remove the '---' separators, or split the jobs into separate files.";
      fail(std::move(d));
    }
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::Exception& e) {
    const auto at = detail::position_of(e.mark);
    Diagnostic d = file_problem(file, "invalid YAML: " + e.msg + ".");
    d.line = at.line;
    d.column = at.column;
    d.hint = "Check the indentation and quoting here and on the line before.";
    fail(std::move(d));
  }

  detail::Locations where(file);
  std::vector<Diagnostic> out;
  detail::apply_overrides(root, overrides, where, out);
  check_expanded_size(root, file);
  Spec spec = detail::read_spec(root, where, out);
  spec.source = file;
  detail::check_spec(spec, where, out);
  detail::throw_if_any(std::move(out));
  return spec;
}

Spec load_spec_file(const std::string& path, const std::vector<std::string>& overrides) {
  const Result<std::string> text = read_bounded_file(path, FileBound{kMaxSpecBytes});
  if (!text.ok()) {
    // The reader's message names the file already.
    fail(file_problem("", text.status.message() + ".", "Pass the path of the job's YAML file (at most " +
                                                           std::to_string(kMaxSpecBytes) + " bytes)."));
  }
  return load_spec_string(text.value, path, overrides);
}

}  // namespace dtrain::spec

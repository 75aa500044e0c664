// Loading a spec: read the text, parse the YAML, apply `--set` overrides, read the document, check the values.
// Every stage adds to one list of diagnostics, so the user sees every problem at once.

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "cli/spec/locations.h"
#include "cli/spec/reader.h"
#include "cli/spec/spec.h"

namespace dtrain::spec {
namespace {

// A spec is a page of YAML; anything this large is the wrong file.
constexpr std::uintmax_t kMaxSpecBytes = 1 << 20;

[[noreturn]] void fail(Diagnostic d) { throw SpecError({std::move(d)}); }

Diagnostic file_problem(const std::string& file, std::string message) {
  Diagnostic d;
  d.file = file;
  d.message = std::move(message);
  return d;
}

// Records where each document starts; every other event is of no interest here.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;

  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

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
  Spec spec = detail::read_spec(root, where, out);
  spec.source = file;
  detail::check_spec(spec, where, out);
  detail::throw_if_any(std::move(out));
  return spec;
}

Spec load_spec_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(file_problem(path, "is a directory, not a job spec."));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(file_problem(path, std::string("cannot read the job spec: ") + std::strerror(errno) + "."));
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxSpecBytes) {
    fail(file_problem(path, "is " + std::to_string(size) + " bytes; a job spec is at most " +
                                std::to_string(kMaxSpecBytes) + "."));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(file_problem(path, std::string("cannot read the job spec: ") + std::strerror(errno) + "."));
  return load_spec_string(text.str(), path, overrides);
}

}  // namespace dtrain::spec

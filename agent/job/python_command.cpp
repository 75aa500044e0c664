#include "agent/job/python_command.h"

#include <cctype>
#include <cstddef>
#include <string_view>

namespace dtrain::agent {
namespace {

std::string_view base_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// python, python3, python3.11: "python", then nothing, a major version, or major.minor.
bool is_interpreter(std::string_view program) {
  std::string_view name = base_name(program);
  if (name.substr(0, 6) != "python") return false;
  name.remove_prefix(6);
  if (name.empty()) return true;
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) return all_digits(name);
  return all_digits(name.substr(0, dot)) && all_digits(name.substr(dot + 1));
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The interpreter's arguments from `i` on: whether they name something to run before they end.
bool interpreter_runs_something(const std::vector<std::string>& argv, std::size_t i) {
  for (; i < argv.size(); ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-" || arg.empty() || arg[0] != '-') return true;  // stdin or a script path
    if (arg == "--") return i + 1 < argv.size();
    if (arg.substr(0, 2) == "--") {
      if (arg == "--check-hash-based-pycs") ++i;  // the one long option that takes a value
      continue;
    }
    // A cluster of one-letter options ("-uB"); -c and -m end the options, -W and -X take a value.
    for (std::size_t k = 1; k < arg.size(); ++k) {
      const char option = arg[k];
      if (option == 'c' || option == 'm') return k + 1 < arg.size() || i + 1 < argv.size();
      if (option == 'W' || option == 'X') {
        if (k + 1 == arg.size()) ++i;
        break;
      }
    }
  }
  return false;
}

// Where the command behind env(1) starts in `argv` (env at `i`); argv.size() when there is none.
std::size_t after_env(const std::vector<std::string>& argv, std::size_t i) {
  for (++i; i < argv.size(); ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-u" || arg == "-C") {
      ++i;
    } else if (arg == "--") {
      return i + 1;
    } else if (!arg.empty() && arg[0] == '-') {
      continue;  // -i, -0, --unset=NAME, --chdir=DIR, ...
    } else if (arg.find('=') == std::string_view::npos) {
      return i;
    }
  }
  return argv.size();
}

}  // namespace

bool runs_python(const std::vector<std::string>& argv) {
  std::size_t i = 0;
  if (!argv.empty() && base_name(argv[0]) == "env") i = after_env(argv, 0);
  if (i >= argv.size()) return false;
  if (ends_with(argv[i], ".py")) return true;
  return is_interpreter(argv[i]) && interpreter_runs_something(argv, i + 1);
}

std::string worker_python_path(const PythonDirs& dirs, bool instrument, const std::vector<std::string>& argv,
                               const std::string& rest) {
  std::string path;
  const auto add = [&path](const std::string& part) {
    if (part.empty()) return;
    if (!path.empty()) path += ':';
    path += part;
  };
  add(dirs.helper);
  if (instrument && runs_python(argv)) add(dirs.bootstrap);
  add(rest);
  return path;
}

}  // namespace dtrain::agent

// torchrun's options on `dtrain run`: CLI11's options, the PET_ defaults and resolution, each a walk over the table
// of option_table.h; torchrun_options.h says what each option does.

#include "cli/run/torchrun_options.h"

#include <CLI/CLI.hpp>
#include <cctype>

#include "cli/run/option_table.h"
#include "cli/run/option_values.h"

namespace dtrain::cli::run {

void add_torchrun_options(CLI::App& cmd, TorchrunArgs& a) {
  const std::string group = "torchrun options (dashes or underscores, --opt=value or --opt value; PET_<OPTION> "
                            "gives an option that is not on the command line, as with torchrun)";
  for (const TorchrunOption& row : torchrun_option_table()) {
    CLI::Option* option = row.kind == TorchrunOption::Kind::flag
                              ? cmd.add_flag(cli_names(row), a.*row.flag, row.help)
                              : cmd.add_option(cli_names(row), a.*row.value, row.help);
    if (*row.default_text != '\0') option->default_str(row.default_text);
    option->group(group);
  }
}

std::string apply_torchrun_environment(const CLI::App& cmd, TorchrunArgs& a,
                                       const std::function<const char*(const char*)>& getenv) {
  for (const TorchrunOption& row : torchrun_option_table()) {
    const char* value = getenv(row.pet);
    if (value == nullptr || cmd.get_option(row.name)->count() > 0) continue;
    if (row.kind == TorchrunOption::Kind::value) {
      a.*row.value = value;
    } else if (auto n = parse_int(value, 0, 1 << 30)) {  // torchrun: bool(int(value))
      a.*row.flag = *n != 0;
    } else {
      return std::string("dtrain run: ") + row.pet + "='" + value + "' must be 0 or 1 (" + row.name +
             " when it is not on the command line, as torchrun reads it)";
    }
    a.from_environment.insert(row.pet);
  }
  return "";
}

// " (--master-port came from PET_MASTER_PORT in the environment)" for each option the refusal names whose value a
// PET_ variable gave: a step may refuse another option than its own (the multi-node step checks --master-addr and
// --master-port), so the options are found by name in the message.
namespace {

// Whether `error` names `option` whole: "--master-port" in "--master-port must be", not in "--master-portx".
bool names_option(const std::string& error, const std::string& option) {
  for (std::size_t at = error.find(option); at != std::string::npos; at = error.find(option, at + 1)) {
    const std::size_t end = at + option.size();
    if (end == error.size()) return true;
    const char next = error[end];
    if (next != '-' && next != '_' && std::isalnum(static_cast<unsigned char>(next)) == 0) return true;
  }
  return false;
}

std::string environment_note(const TorchrunArgs& a, const std::string& error) {
  std::string note;
  for (const TorchrunOption& row : torchrun_option_table()) {
    if (a.from_environment.count(row.pet) != 0 && names_option(error, row.name))
      note += std::string(" (") + row.name + " came from " + row.pet + " in the environment)";
  }
  return note;
}

}  // namespace

Resolved resolve(const TorchrunArgs& a, const std::vector<std::string>& program, bool dashdash, int nodes,
                 bool console_given, const HostFacts& host) {
  Resolved r;
  Resolution res{a, program, dashdash, nodes, console_given, host, r};
  for (const TorchrunOption& row : torchrun_option_table()) {
    if (row.step == nullptr) continue;
    r.error = row.step(res);
    if (r.error.empty()) continue;
    r.error += environment_note(a, r.error);
    return r;
  }
  r.error = resolve_program(res);
  return r;
}

}  // namespace dtrain::cli::run

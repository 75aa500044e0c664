// The torchrun options' table (cli/run/option_table.h) and what iterates it: every row is an option of the command
// line in both spellings and in --help, its PET_ variable is torchrun's name for it and gives its value when the
// option is not on the command line (the command line wins), a flag's variable must be a number, and a refusal of a
// value that came from the environment says so.

#include <algorithm>
#include <cctype>
#include <map>

#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include "cli/run/option_table.h"
#include "cli/run/torchrun_options.h"

// A named namespace: the unity build compiles this file with the area's other tests.
namespace option_table_test {

using dtrain::cli::run::HostFacts;
using dtrain::cli::run::Resolved;
using dtrain::cli::run::TorchrunArgs;
using dtrain::cli::run::TorchrunOption;
using Env = std::map<std::string, std::string>;

struct Run {
  std::string env_error;
  Resolved resolved;
  TorchrunArgs args;
};

HostFacts facts() {
  HostFacts h;
  h.cpu_count = 4;
  h.python = "/usr/bin/python3";
  h.local_host = [](const std::string& host) { return host == "127.0.0.1" ? "" : "is not an address of this machine"; };
  h.port_free = [](const std::string&, int) { return std::string(); };
  return h;
}

// `dtrain run ARGV...` with `env` as the environment, parsed, given its PET_ defaults and resolved as cmd_run.cpp does.
Run run(std::vector<std::string> argv, const Env& env) {
  Run out;
  CLI::App app;
  auto* cmd = app.add_subcommand("run");
  std::vector<std::string> program;
  dtrain::cli::run::add_torchrun_options(*cmd, out.args);
  cmd->add_option("command", program);
  cmd->positionals_at_end();
  argv.insert(argv.begin(), "run");
  std::reverse(argv.begin(), argv.end());  // CLI11 takes a vector in reverse order
  app.parse(argv);
  out.env_error = dtrain::cli::run::apply_torchrun_environment(*cmd, out.args, [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  if (out.env_error.empty()) out.resolved = dtrain::cli::run::resolve(out.args, program, false, 1, false, facts());
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// torchrun's rule: PET_ and the longest spelling, without its dashes, in capitals, dashes as underscores.
std::string torchrun_pet_name(const std::string& name) {
  std::string pet = "PET_";
  for (char c : name.substr(2)) pet += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return pet;
}

TEST_CASE("every row: torchrun's PET_ name, a value or flag member, both spellings parsed, shown in --help") {
  const auto& rows = dtrain::cli::run::torchrun_option_table();
  CHECK(rows.size() == 21);
  CLI::App app;
  auto* cmd = app.add_subcommand("run");
  TorchrunArgs args;
  dtrain::cli::run::add_torchrun_options(*cmd, args);
  const std::string help = cmd->help();
  for (const TorchrunOption& row : rows) {
    CAPTURE(row.name);
    CHECK(std::string(row.pet) == torchrun_pet_name(row.name));
    CHECK((row.kind == TorchrunOption::Kind::value) == (row.value != nullptr));
    CHECK((row.kind == TorchrunOption::Kind::flag) == (row.flag != nullptr));
    CHECK(has(help, row.name));
    CHECK(has(help, row.help));
    std::string underscored = row.name;
    std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
    CHECK((cmd->get_option_no_throw(underscored) != nullptr) == (row.underscores || underscored == row.name));
  }
  CHECK(has(help, "PET_"));
}

TEST_CASE("a PET_ variable gives an option that is not on the command line its value; the command line wins") {
  Run r = run({"t.py"}, {{"PET_NPROC_PER_NODE", "3"}, {"PET_MAX_RESTARTS", "2"}, {"PET_NO_PYTHON", "1"}});
  REQUIRE(r.env_error.empty());
  CHECK(r.resolved.error.empty());
  CHECK(r.resolved.nproc == 3);
  CHECK(r.resolved.max_restarts == 2);
  CHECK(r.resolved.command == std::vector<std::string>{"t.py"});  // --no-python from PET_NO_PYTHON
  CHECK(r.args.from_environment.count("PET_NPROC_PER_NODE") == 1);

  Run given = run({"-n", "5", "t.py"}, {{"PET_NPROC_PER_NODE", "3"}, {"PET_NO_PYTHON", "0"}});
  CHECK(given.resolved.nproc == 5);
  CHECK(given.args.from_environment.count("PET_NPROC_PER_NODE") == 0);
  CHECK(given.resolved.command == std::vector<std::string>{"/usr/bin/python3", "-u", "t.py"});

  CHECK(run({"t.py"}, {}).resolved.nproc == 1);
  CHECK(run({"t.py"}, {{"PET_REDIRECTS", "3"}}).resolved.console == Resolved::Console::none);
}

TEST_CASE("a bad PET_ value is refused, naming the variable") {
  Run flag = run({"t.py"}, {{"PET_STANDALONE", "yes"}});
  CHECK(has(flag.env_error, "PET_STANDALONE='yes' must be 0 or 1"));
  CHECK(has(flag.env_error, "--standalone"));

  Run value = run({"t.py"}, {{"PET_NPROC_PER_NODE", "many"}});
  CHECK(value.env_error.empty());
  CHECK(has(value.resolved.error, "--nproc-per-node must be a number"));
  CHECK(has(value.resolved.error, "--nproc-per-node came from PET_NPROC_PER_NODE"));

  // The same refusal for a value on the command line does not blame the environment.
  CHECK(!has(run({"-n", "many", "t.py"}, {}).resolved.error, "PET_"));

  // A step that refuses another option than its own (the multi-node step checks --master-port) still says where the
  // value came from: what a Kubeflow PyTorchJob sets, PET_MASTER_PORT.
  Run port = run({"t.py"}, {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"}, {"PET_MASTER_ADDR", "localhost"},
                            {"PET_MASTER_PORT", "99999"}});
  CHECK(has(port.resolved.error, "--master-port must be a number"));
  CHECK(has(port.resolved.error, "--master-port came from PET_MASTER_PORT"));
  CHECK(!has(port.resolved.error, "--master-addr came from"));  // named only where the refusal names it
}

}  // namespace option_table_test

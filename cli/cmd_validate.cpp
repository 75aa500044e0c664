// `dtrain validate JOB.yaml [--set key=value]...`: check a spec without running it.

#include <cstdio>

#include "cli/commands.h"

namespace dtrain::cli {

Action add_validate_command(CLI::App& app) {
  struct Args {
    std::string file;
    std::vector<std::string> sets;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("validate", "Check a job spec; errors name file:line:column and the fix");
  cmd->add_option("spec", args->file, "job spec (YAML)")->required();
  cmd->add_option("--set", args->sets, "override a key of the spec (repeatable)");
  return [args]() {
    if (!load_spec_or_report(args->file, args->sets)) return 2;
    std::printf("%s: valid\n", args->file.c_str());
    return 0;
  };
}

}  // namespace dtrain::cli

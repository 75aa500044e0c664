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
    try {
      spec::Spec spec = spec::load_spec_file(args->file, args->sets);
      std::printf("%s: valid\n", args->file.c_str());
      return 0;
    } catch (const spec::SpecError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  };
}

}  // namespace dtrain::cli

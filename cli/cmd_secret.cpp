// `dtrain secret init [--dir D] [--force]`: create the cluster's CA and token (agent/security/secret.h) that
// agents and launchers authenticate each other with.

#include <cstdio>
#include <filesystem>

#include "agent/security/secret.h"
#include "cli/commands.h"

namespace dtrain::cli {

Action add_secret_command(CLI::App& app) {
  struct Args {
    std::string dir;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("secret", "Manage the cluster secret that agents and launchers authenticate with");
  cmd->require_subcommand(1);
  auto* init = cmd->add_subcommand("init", "Create the cluster's CA and token (mode 0700 directory, 0600 files)");
  init->add_option("--dir", args->dir, "where to write it (default: $DTRAIN_SECRET_DIR, else ~/.dtrain)");
  init->add_flag("--force", args->force, "replace an existing secret (every node must then get the new one)");
  return [args]() {
    try {
      std::string dir = args->dir.empty() ? security::default_secret_dir() : args->dir;
      std::filesystem::path path = std::filesystem::absolute(dir).lexically_normal();
      if (path.filename().empty()) path = path.parent_path();  // "/a/b/" -> "/a/b"
      dir = path.string();
      std::string parent = path.parent_path().string();
      if (parent.empty() || parent.back() != '/') parent += '/';
      security::init_secret(dir, args->force);
      std::printf("dtrain: wrote a new cluster secret to %s (%s, %s, %s)\n", dir.c_str(), security::kCaKeyFile,
                  security::kCaCertFile, security::kTokenFile);
      std::printf("next: copy %s to every node, keeping mode 0700 (e.g. `scp -rp %s NODE:%s`);\n", dir.c_str(),
                  dir.c_str(), parent.c_str());
      std::printf("      whoever can read it can run commands on every agent of this cluster\n");
      std::printf("agents: dtrain agent --listen ADDR:PORT --secret-dir %s\n", dir.c_str());
      return 0;
    } catch (const security::SecurityError& e) {
      std::fprintf(stderr, "dtrain secret init: %s\n", e.what());
      return 1;
    }
  };
}

}  // namespace dtrain::cli

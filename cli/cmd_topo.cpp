// `dtrain topo [--json] [--import FILE]`: the node's GPU/NIC/CPU topology as NCCL will see it, like
// `nvidia-smi topo -m`, with per-local-rank recommendations.

#include <cstdio>
#include <utility>

#include "agent/node/topology/node_topology.h"
#include "agent/node/topology/topology.h"
#include "cli/commands.h"

namespace dtrain::cli {

Action add_topo_command(CLI::App& app) {
  struct Args {
    bool json = false;
    std::string import_file;
    std::string sysfs = "/sys";
    std::string procfs = "/proc";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("topo", "GPU/NIC/CPU topology like `nvidia-smi topo -m`, with per-local-rank advice");
  cmd->add_flag("--json", args->json, "print JSON instead of text");
  cmd->add_option("--import", args->import_file, "analyse a saved `nvidia-smi topo -m` output instead of this node");
  cmd->add_option("--sysfs-root", args->sysfs, "sysfs to read (default /sys)");
  cmd->add_option("--procfs-root", args->procfs, "procfs to read (default /proc)");
  return [args]() {
    node::topo::Report report;
    if (!args->import_file.empty()) {
      Result<node::topo::Report> imported = node::topo::import_topology_file(args->import_file);
      if (!imported.ok()) {
        std::fprintf(stderr, "dtrain topo: %s\n", imported.status.message().c_str());
        return 2;
      }
      report = std::move(imported.value);
    } else {
      node::topo::TopologyOptions options;
      options.roots = {args->sysfs, args->procfs};
      report = node::topo::live_topology(options);
    }
    std::string out = args->json ? node::topo::render_json(report) : node::topo::render_text(report);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace dtrain::cli

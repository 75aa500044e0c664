#pragma once

// torchrun's options as one table: a row per option with its spellings, the kind of value it takes, torchrun's
// PET_ environment variable for it, its default, its --help text, where its value goes in TorchrunArgs, and its step
// of resolution. Parsing (add_torchrun_options), the PET_ defaults (apply_torchrun_environment), --help and
// resolve() all iterate the rows, in the table's order, which is the order of resolution: a row's step may use what
// the steps of the rows above it decided (--node-rank after --nnodes, --local-ranks-filter after
// --nproc-per-node, --redirects and --tee). A row without a step is taken as it is or read by another row's step
// (--standalone by --nnodes' and --rdzv-backend's, -m and --no-python by the program's). What each option means is
// in torchrun_options.h.

#include <string>
#include <vector>

#include "cli/run/torchrun_options.h"

namespace dtrain::cli::run {

// What resolve() works on: its inputs and the job it builds, shared by the rows' steps.
struct Resolution {
  const TorchrunArgs& a;
  const std::vector<std::string>& program;
  bool dashdash;
  int nodes;           // dtrain's --nodes (simulated nodes on this machine)
  bool console_given;  // dtrain's --console was on the command line
  const HostFacts& host;
  Resolved& r;
  std::string nnodes;   // --nnodes, or the Slurm step's node count when it decides; "" = one node
  bool c10d = false;    // the rendezvous would bind its endpoint's port (c10d, or --standalone without a backend)
  int redirects = 0;    // --redirects, 0-3
  int tee = 0;          // --tee, 0-3
};

// One step of resolution: "" when the row's option is fine (its part of the job is set in `res.r`), else the
// refusal, which names the option.
using ResolveStep = std::string (*)(Resolution& res);

struct TorchrunOption {
  enum class Kind { value, flag };
  const char* name;          // the long spelling with dashes: "--nproc-per-node"
  const char* short_name;    // "-n", or ""
  bool underscores;          // also spelled with underscores ("--nproc_per_node"), as torchrun spells it
  Kind kind;
  const char* pet;           // torchrun's environment default: "PET_NPROC_PER_NODE"
  const char* default_text;  // shown in --help; "" = none
  const char* help;
  std::string TorchrunArgs::*value;  // Kind::value: where it goes
  bool TorchrunArgs::*flag;          // Kind::flag: where it goes
  ResolveStep step;                  // nullptr: nothing to check on its own
};

// The rows, in the order of resolution.
const std::vector<TorchrunOption>& torchrun_option_table();

// Every spelling of `option` for CLI11: "-n,--nproc-per-node,--nproc_per_node".
std::string cli_names(const TorchrunOption& option);

// The rows' steps (resolve_nodes.cpp, resolve_rendezvous.cpp, resolve_output.cpp).
std::string resolve_nnodes(Resolution& res);
std::string resolve_node_rank(Resolution& res);
std::string resolve_nproc(Resolution& res);
std::string resolve_rdzv_backend(Resolution& res);
std::string resolve_rdzv_endpoint(Resolution& res);
std::string resolve_rdzv_conf(Resolution& res);
std::string resolve_master_addr(Resolution& res);
std::string resolve_master_port(Resolution& res);
std::string resolve_monitor_interval(Resolution& res);
std::string resolve_start_method(Resolution& res);
std::string resolve_role(Resolution& res);
std::string resolve_max_restarts(Resolution& res);
std::string resolve_redirects(Resolution& res);
std::string resolve_tee(Resolution& res);
std::string resolve_console(Resolution& res);
std::string resolve_log_dir(Resolution& res);
// Not a row: the program after the options, with -m, --no-python and --run-path; after every row's step.
std::string resolve_program(Resolution& res);

}  // namespace dtrain::cli::run

// `dtrain launch --dry-run`: the plan as text, one block per rank, everything a worker would get.

#include <algorithm>
#include <cctype>
#include <sstream>

#include "cli/spec/spec.h"
#include "common/os/cpu_list.h"

namespace dtrain::spec {
namespace {

// Quotes `word` for a POSIX shell when it needs it, so argv and env lines can be pasted into a terminal.
std::string shell_quote(const std::string& word) {
  constexpr std::string_view kSafe = "_./:=@%+,-";
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kSafe.find(c) != std::string_view::npos;
  });
  if (plain) return word;
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

}  // namespace

std::string render_plan(const Spec& spec, const Plan& plan) {
  std::ostringstream out;
  out << "job " << spec.name << ": " << plan.nnodes << (plan.nnodes == 1 ? " node" : " nodes") << " x "
      << plan.workers_per_node << (plan.workers_per_node == 1 ? " worker" : " workers") << " = "
      << plan.world_size << (plan.world_size == 1 ? " rank" : " ranks") << " (provider "
      << to_string(spec.nodes.provider) << ", binding " << to_string(spec.binding) << ", max restarts "
      << spec.restart.max_restarts << ")\n";
  for (const auto& warning : plan.warnings) out << "warning: " << warning << "\n";
  for (const auto& w : plan.workers) {
    std::string argv;
    for (const auto& arg : w.argv) argv += (argv.empty() ? "" : " ") + shell_quote(arg);
    out << "\nrank " << w.rank << ": node " << w.node_rank << ", host " << w.host << ", local rank " << w.local_rank
        << "\n";
    out << "  cpus:        " << (w.cpus.empty() ? "not pinned" : format_cpu_list(w.cpus)) << "\n";
    if (w.gpu) {
      std::string nics;
      for (const auto& nic : w.nics) nics += (nics.empty() ? "" : ", ") + nic;
      out << "  gpu:         " << *w.gpu << "\n";
      out << "  nics:        " << (nics.empty() ? "none" : nics) << "\n";
    }
    out << "  argv:        " << argv << "\n";
    out << "  working dir: " << w.working_dir << "\n";
    out << "  log:         " << w.log_path << (w.stream_stdout ? " (shown on the console)" : "") << "\n";
    out << "  error file:  " << w.error_file << "\n";
    out << "  env:\n";
    for (const auto& [name, value] : w.env) {  // std::map: sorted by name
      const bool placeholder = value == kReservedAtLaunch;
      const bool secret = name == "DTRAIN_JOB_TOKEN" && !placeholder;
      out << "    " << name << "=" << (secret ? "<hidden>" : placeholder ? value : shell_quote(value)) << "\n";
    }
  }
  return out.str();
}

}  // namespace dtrain::spec

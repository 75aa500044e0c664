// The steps of the output options (--redirects, --tee, --local-ranks-filter, --log-dir) and of the program after the
// options (-m, --no-python, --run-path, `--`); see option_table.h.

#include <set>

#include "cli/run/option_table.h"
#include "cli/run/option_values.h"

namespace dtrain::cli::run {
namespace {

// --local-ranks-filter: these local ranks of every simulated node.
std::string console_ranks(Resolution& res) {
  const std::string& filter = res.a.local_ranks_filter;
  Resolved& r = res.r;
  std::set<int> locals;
  for (const auto& item : split(filter, ',')) {
    auto l = parse_int(item, 0, 1 << 16);
    if (!l || *l >= r.nproc) {
      return "dtrain run: --local-ranks-filter '" + filter + "': each entry must be a local rank from 0 to " +
             std::to_string(r.nproc - 1);
    }
    locals.insert(static_cast<int>(*l));
  }
  r.console = Resolved::Console::ranks;
  r.console_local_ranks.assign(locals.begin(), locals.end());
  for (int node = 0; node < res.nodes; ++node) {
    for (int l : locals) r.console_ranks.push_back(node * r.nproc + l);
  }
  return "";
}

}  // namespace

std::string resolve_redirects(Resolution& res) {
  if (auto e = parse_streams("--redirects", res.a.redirects, res.redirects); !e.empty()) return e;
  res.r.redirects = res.redirects;
  return "";
}

std::string resolve_tee(Resolution& res) { return parse_streams("--tee", res.a.tee, res.tee); }

// Whose output the console shows, from --redirects, --tee and --local-ranks-filter (which conflict with --console).
std::string resolve_console(Resolution& res) {
  const TorchrunArgs& a = res.a;
  const bool output_flags = !a.redirects.empty() || !a.tee.empty() || !a.local_ranks_filter.empty();
  if (!output_flags) return "";
  if (res.console_given) {
    const char* which = !a.local_ranks_filter.empty() ? "--local-ranks-filter"
                        : !a.redirects.empty()        ? "--redirects"
                                                      : "--tee";
    return std::string("dtrain run: --console and ") + which +
           " both say whose output the console shows: give one of them";
  }
  const int shown = (~res.redirects | res.tee) & 3;  // the streams torchrun would show on the console
  if (shown != 0 && shown != 3) {
    res.r.notes.push_back("dtrain shows a rank's stdout and stderr together: --redirects/--tee that show one stream "
                          "show both");
  }
  if (shown == 0) {
    res.r.console = Resolved::Console::none;
    return "";
  }
  if (!a.local_ranks_filter.empty()) return console_ranks(res);
  res.r.console = Resolved::Console::all;
  return "";
}

std::string resolve_log_dir(Resolution& res) {
  if (res.a.log_dir.empty()) return "";
  if (res.nodes > 1) {
    return "dtrain run: --log-dir lays files out for one node, as torchrun does; with --nodes " +
           std::to_string(res.nodes) + " use dtrain's run directory (--logs-dir)";
  }
  res.r.log_dir = res.a.log_dir;
  return "";
}

std::string resolve_program(Resolution& res) {
  const TorchrunArgs& a = res.a;
  const auto& program = res.program;
  if (a.module && a.no_python) return "dtrain run: -m/--module and --no-python conflict: give one of them";
  if (program.empty()) {
    return "dtrain run: no program: give a script (dtrain run [OPTIONS] script.py ARGS), -m MODULE ARGS, "
           "--no-python PROGRAM ARGS, or -- CMD ARGS";
  }
  auto& command = res.r.command;
  if (res.dashdash) {
    if (a.module || a.run_path) {
      return std::string("dtrain run: ") + (a.module ? "-m/--module" : "--run-path") +
             " with `-- CMD ARGS`: CMD runs as it is; give the module or script without `--`";
    }
    command = program;
  } else if (a.no_python) {
    command = program;
  } else {
    command = {res.host.python, "-u"};  // as torchrun: [sys.executable, "-u", ...]
    if (a.module) command.push_back("-m");
    command.insert(command.end(), program.begin(), program.end());
  }
  return "";
}

}  // namespace dtrain::cli::run

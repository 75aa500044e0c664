// torchrun's options on `dtrain run` (one node); see torchrun_options.h for what each does.

#include "cli/run/torchrun_options.h"

#include <set>

#include <CLI/CLI.hpp>

#include "cli/run/multi_node_checks.h"
#include "cli/run/option_values.h"
#include "common/util.h"

namespace dtrain::cli::run {
namespace {

const char* const kMultiNode =
    "that is another machine: a job across machines is --nnodes N (or MIN:MAX) with the same command on every node "
    "(README \"Coming from torchrun\")";

}  // namespace

void add_torchrun_options(CLI::App& cmd, TorchrunArgs& a) {
  const std::string g = "torchrun options (dashes or underscores, --opt=value or --opt value)";
  cmd.add_option("-n," + spellings("--nproc-per-node"), a.nproc_per_node,
                 "workers per node: N | cpu | auto | gpu (-n is the same option)")
      ->capture_default_str()
      ->group(g);
  cmd.add_option(spellings("--nnodes"), a.nnodes,
                 "N or MIN:MAX nodes; above 1, run the same command on every node")
      ->group(g);
  cmd.add_option(spellings("--node-rank"), a.node_rank,
                 "this node's rank (default: SLURM_NODEID under srun, else join order); rank 0 runs the launcher")
      ->group(g);
  cmd.add_option(spellings("--rdzv-backend"), a.rdzv_backend, "c10d | static (dtrain's launcher is the rendezvous)")
      ->group(g);
  cmd.add_option(spellings("--rdzv-endpoint"), a.rdzv_endpoint,
                 "HOST[:PORT] (port 29400): the node owning HOST runs the launcher, the others join it")->group(g);
  cmd.add_option(spellings("--rdzv-id"), a.rdzv_id, "taken; the run is named by dtrain's job id")->group(g);
  cmd.add_option(spellings("--rdzv-conf"), a.rdzv_conf, "K=V,...: join_timeout, read_timeout")->group(g);
  cmd.add_flag("--standalone", a.standalone, "one node on this machine")->group(g);
  cmd.add_option(spellings("--master-addr"), a.master_addr,
                 "with --master-port (29500): the endpoint when --rdzv-endpoint is not given")->group(g);
  cmd.add_option(spellings("--master-port"), a.master_port, "checked free; dtrain's agent reserves MASTER_PORT")
      ->group(g);
  cmd.add_option(spellings("--max-restarts"), a.max_restarts, "restarts after a failure")
      ->capture_default_str()
      ->group(g);
  cmd.add_option(spellings("--monitor-interval"), a.monitor_interval, "taken; dtrain does not poll")->group(g);
  cmd.add_option(spellings("--start-method"), a.start_method, "spawn | fork | forkserver: taken (workers are new "
                 "processes)")->group(g);
  cmd.add_option("--role", a.role, "default only")->group(g);
  cmd.add_option(spellings("--log-dir"), a.log_dir, "per-rank files as torchrun lays them out, when the job ends")
      ->group(g);
  cmd.add_option("-r,--redirects", a.redirects, "0-3: streams to files only")->group(g);
  cmd.add_option("-t,--tee", a.tee, "0-3: streams to files and the console")->group(g);
  cmd.add_option(spellings("--local-ranks-filter"), a.local_ranks_filter, "L,...: only these local ranks' output")
      ->group(g);
  cmd.add_flag(spellings("--run-path"), a.run_path, "taken; the script runs under Python")->group(g);
  cmd.add_flag("-m,--module", a.module, "the program is a Python module (python -m MODULE)")->group(g);
  cmd.add_flag(spellings("--no-python"), a.no_python, "run the program itself, not under Python")->group(g);
}

namespace {

// Multi-node: where the launcher listens, and whether this node runs it. Returns "" or the refusal.
std::string multi_node_endpoint(const TorchrunArgs& a, const HostFacts& host, Resolved::MultiNode& m) {
  const std::string nnodes = m.min_nodes == m.max_nodes
                                 ? std::to_string(m.max_nodes)
                                 : std::to_string(m.min_nodes) + ":" + std::to_string(m.max_nodes);
  std::string option, text, ep_host;
  int port = 0;
  if (!a.rdzv_endpoint.empty()) {
    option = "--rdzv-endpoint";
    text = a.rdzv_endpoint;
    if (auto why = split_endpoint(text, ep_host, port); !why.empty()) {
      return "dtrain run: --rdzv-endpoint '" + text + "': " + why + " (expected HOST[:PORT])";
    }
    if (port == 0) port = 29400;  // torchrun's c10d default
  } else if (!a.master_addr.empty()) {
    option = "--master-addr";
    text = ep_host = a.master_addr;
    port = 29500;  // torchrun's MASTER_PORT default
    if (!a.master_port.empty()) {
      auto p = parse_int(a.master_port, 1, 65535);
      if (!p) return "dtrain run: --master-port must be a number from 1 to 65535 with --nnodes (got '" + a.master_port + "')";
      port = static_cast<int>(*p);
    }
  } else if (!host.slurm_node_id.empty()) {
    option = "the Slurm allocation's first host";
    ep_host = host.slurm_first_host ? host.slurm_first_host() : "";
    if (ep_host.empty()) {
      return "dtrain run: --nnodes " + nnodes + " under Slurm: the allocation's first host could not be had from "
             "SLURM_JOB_NODELIST (scontrol show hostnames); give --rdzv-endpoint HOST[:PORT]";
    }
    port = 29400;
    text = ep_host;
  } else {
    return "dtrain run: --nnodes " + nnodes + " needs --rdzv-endpoint HOST[:PORT] (or --master-addr HOST): the "
           "same command on every node, and the node that owns HOST runs the launcher the others join";
  }
  const std::string why_local = host.local_host(ep_host);
  if (why_local.rfind("cannot be resolved", 0) == 0) {
    return "dtrain run: " + option + " " + text + ": host '" + ep_host + "' " + why_local;
  }
  m.launcher = m.node_rank ? *m.node_rank == 0 : why_local.empty();
  if (m.launcher && !why_local.empty()) {
    return "dtrain run: --node-rank 0 runs the launcher, which listens on " + option + " " + text + ", but '" +
           ep_host + "' " + why_local + "; run node rank 0 on that machine, or point the endpoint at this one";
  }
  if (m.launcher) {
    if (auto why = host.port_free(ep_host, port); !why.empty()) {
      return "dtrain run: " + option + " " + text + ": port " + std::to_string(port) + " " + why +
             " on this machine, where the launcher would listen; give a free port on every node";
    }
  }
  m.endpoint = (ep_host.find(':') != std::string::npos ? "[" + ep_host + "]" : ep_host) + ":" + std::to_string(port);
  return "";
}

}  // namespace

Resolved resolve(const TorchrunArgs& a, const std::vector<std::string>& program, bool dashdash, int nodes,
                 bool console_given, const HostFacts& host) {
  Resolved r;
  auto fail = [&](std::string message) {
    r.error = std::move(message);
    return r;
  };

  // --nnodes and --standalone first: their conflict is named before the multi-node refusal. Under srun, --nnodes
  // defaults to the step's node count.
  std::string nnodes = a.nnodes;
  if (nnodes.empty() && !a.standalone && !host.slurm_node_id.empty() && !host.slurm_step_nodes.empty()) {
    const auto n = parse_int(host.slurm_step_nodes, 1, 1 << 20);
    if (auto why = check_slurm_step_nodes(host.slurm_step_nodes, n); !why.empty()) return fail(why);
    if (*n > 1) nnodes = host.slurm_step_nodes;
  }
  if (!nnodes.empty()) {
    auto parts = split(nnodes, ':');
    std::optional<long> lo = parse_int(parts[0], 1, 1 << 20);
    std::optional<long> hi = parts.size() == 2 ? parse_int(parts[1], 1, 1 << 20) : lo;
    if (parts.size() > 2 || !lo || !hi || *lo > *hi) {
      return fail("dtrain run: --nnodes must be N or MIN:MAX with 1 <= MIN <= MAX (got '" + nnodes + "')");
    }
    if (*hi > 1) {
      if (a.standalone) {
        return fail("dtrain run: --standalone runs one node, and --nnodes " + nnodes +
                    " asks for more: leave one of them out");
      }
      if (nodes > 1) {
        return fail("dtrain run: --nodes " + std::to_string(nodes) + " simulates nodes on this machine, and --nnodes " +
                    nnodes + " runs on real ones: give one of them");
      }
      r.multi = Resolved::MultiNode{static_cast<int>(*lo), static_cast<int>(*hi), "", false, std::nullopt};
    }
  }
  if (!a.node_rank.empty()) {
    auto rank = parse_int(a.node_rank, 0, 1 << 20);
    if (!rank) return fail("dtrain run: --node-rank must be a whole number >= 0 (got '" + a.node_rank + "')");
    if (!r.multi && *rank != 0) {
      return fail("dtrain run: --node-rank " + a.node_rank + " needs --nnodes above 1 (the same command on every node)");
    }
    if (r.multi) r.multi->node_rank = static_cast<unsigned>(*rank);
  }
  if (r.multi && !r.multi->node_rank && !host.slurm_node_id.empty()) {
    auto rank = parse_int(host.slurm_node_id, 0, 1 << 20);
    if (!rank) return fail("dtrain run: SLURM_NODEID is '" + host.slurm_node_id + "', not a node number");
    r.multi->node_rank = static_cast<unsigned>(*rank);
  }
  if (r.multi && r.multi->node_rank) {
    const std::string source = a.node_rank.empty() ? "SLURM_NODEID" : "--node-rank";
    if (auto why = check_node_rank(*r.multi->node_rank, r.multi->max_nodes, source, nnodes); !why.empty()) {
      return fail(why);
    }
  }

  // Workers per node.
  if (a.nproc_per_node == "cpu") {
    r.nproc = host.cpu_count;
  } else if (a.nproc_per_node == "auto") {
    r.nproc = host.gpu_count > 0 ? host.gpu_count : host.cpu_count;
  } else if (a.nproc_per_node == "gpu") {
    if (host.gpu_count == 0) {
      return fail("dtrain run: --nproc-per-node gpu: this machine has no GPUs (no NVIDIA driver lists one under "
                  "/proc/driver/nvidia/gpus); give a number, or cpu");
    }
    r.nproc = host.gpu_count;
  } else if (auto n = parse_int(a.nproc_per_node, 1, 2147483647)) {  // validate() bounds it, naming workers_per_node
    r.nproc = static_cast<int>(*n);
  } else {
    return fail("dtrain run: --nproc-per-node must be a number >= 1, cpu, auto or gpu (got '" + a.nproc_per_node +
                "')");
  }

  // Rendezvous.
  const bool c10d = a.rdzv_backend == "c10d" || (a.rdzv_backend.empty() && a.standalone);
  if (!a.rdzv_backend.empty() && a.rdzv_backend != "c10d" && a.rdzv_backend != "static") {
    if (a.rdzv_backend == "etcd" || a.rdzv_backend == "etcd-v2") {
      return fail("dtrain run: --rdzv-backend " + a.rdzv_backend +
                  ": dtrain's launcher is the rendezvous and uses no etcd server; give c10d or leave it out");
    }
    return fail("dtrain run: --rdzv-backend must be c10d or static (got '" + a.rdzv_backend + "')");
  }
  if (r.multi) {
    if (auto why = multi_node_endpoint(a, host, *r.multi); !why.empty()) return fail(why);
  } else if (!a.rdzv_endpoint.empty()) {
    std::string ep_host;
    int ep_port = 0;
    if (auto why = split_endpoint(a.rdzv_endpoint, ep_host, ep_port); !why.empty()) {
      return fail("dtrain run: --rdzv-endpoint '" + a.rdzv_endpoint + "': " + why + " (expected HOST[:PORT])");
    }
    if (a.standalone) {
      r.notes.push_back("--standalone runs on this machine: --rdzv-endpoint " + a.rdzv_endpoint +
                        " is ignored, as torchrun ignores it");
    } else {
      if (auto why = host.local_host(ep_host); !why.empty()) {
        if (why.rfind("cannot be resolved", 0) == 0) {
          return fail("dtrain run: --rdzv-endpoint " + a.rdzv_endpoint + ": host '" + ep_host + "' " + why);
        }
        return fail("dtrain run: --rdzv-endpoint " + a.rdzv_endpoint + ": '" + ep_host + "' " + why + "; " +
                    kMultiNode);
      }
      if (c10d || a.rdzv_backend.empty()) {
        int port = ep_port ? ep_port : 29400;  // torchrun's default c10d port
        if (auto why = host.port_free(ep_host, port); !why.empty()) {
          return fail("dtrain run: --rdzv-endpoint " + a.rdzv_endpoint + ": port " + std::to_string(port) + " " +
                      why + " (torchrun's c10d store would bind it); give a free port or leave the option out");
        }
      }
    }
  }
  if (!a.rdzv_conf.empty()) {
    static const std::set<std::string> ignored = {"last_call_timeout", "close_timeout",       "timeout",
                                                  "is_host",           "keep_alive_interval", "keep_alive_max_attempt"};
    for (const auto& item : split(a.rdzv_conf, ',')) {
      if (item.empty()) continue;
      auto eq = item.find('=');
      if (eq == std::string::npos) {
        return fail("dtrain run: --rdzv-conf '" + item + "': expected KEY=VALUE (join_timeout=S, read_timeout=S)");
      }
      std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      if (key == "join_timeout" || key == "read_timeout") {
        auto s = parse_seconds(value);
        if (!s || *s <= 0) {
          return fail("dtrain run: --rdzv-conf " + key + " must be seconds > 0 (got '" + value + "')");
        }
        if (auto why = check_rdzv_timeout(key, value, *s); !why.empty()) return fail(why);
        (key == "join_timeout" ? r.join_timeout_s : r.node_timeout_s) = *s;
      } else if (ignored.count(key)) {
        r.notes.push_back("--rdzv-conf " + key + " has no dtrain meaning; ignored");
      } else {
        return fail("dtrain run: --rdzv-conf key '" + key +
                    "' is not known; dtrain takes join_timeout (nodes.join_timeout_s) and read_timeout "
                    "(health.node_timeout_s)");
      }
    }
  }
  if (!a.master_addr.empty() && !r.multi) {
    if (auto why = host.local_host(a.master_addr); !why.empty()) {
      if (why.rfind("cannot be resolved", 0) == 0) {
        return fail("dtrain run: --master-addr '" + a.master_addr + "' " + why);
      }
      return fail("dtrain run: --master-addr " + a.master_addr + " " + why + "; " + kMultiNode);
    }
  }
  if (!a.master_port.empty()) {
    auto port = parse_int(a.master_port, 0, 65535);
    if (!port) return fail("dtrain run: --master-port must be a number from 0 to 65535 (got '" + a.master_port + "')");
    if (*port != 0 && !c10d && !r.multi) {
      const std::string addr = a.master_addr.empty() ? "127.0.0.1" : a.master_addr;
      if (auto why = host.port_free(addr, static_cast<int>(*port)); !why.empty()) {
        return fail("dtrain run: --master-port " + a.master_port + " " + why + " on " + addr +
                    " (torchrun's static rendezvous would bind it); give a free port or leave the option out");
      }
    }
    r.notes.push_back("--master-port is not MASTER_PORT's value: dtrain's agent reserves a free port for it");
  }
  if (!a.monitor_interval.empty()) {
    if (!parse_seconds(a.monitor_interval)) {
      return fail("dtrain run: --monitor-interval must be seconds >= 0 (got '" + a.monitor_interval + "')");
    }
    r.notes.push_back("--monitor-interval has no effect: dtrain does not poll its workers, it sees each exit at once");
  }
  if (!a.start_method.empty()) {
    if (a.start_method != "spawn" && a.start_method != "fork" && a.start_method != "forkserver") {
      return fail("dtrain run: --start-method must be spawn, fork or forkserver (got '" + a.start_method + "')");
    }
    if (a.start_method != "spawn") {
      r.notes.push_back("--start-method " + a.start_method +
                        ": every dtrain worker is a new process its agent execs, as with spawn");
    }
  }
  if (!a.role.empty() && a.role != "default") {
    return fail("dtrain run: --role " + a.role +
                ": dtrain runs one role per job, named 'default' (ROLE_NAME); leave --role out");
  }
  if (a.max_restarts < 0) return fail("dtrain run: --max-restarts must be >= 0");
  r.max_restarts = a.max_restarts;

  // Output.
  int redirects = 0, tee = 0;
  if (auto e = parse_streams("--redirects", a.redirects, redirects); !e.empty()) return fail(e);
  if (auto e = parse_streams("--tee", a.tee, tee); !e.empty()) return fail(e);
  r.redirects = redirects;
  const bool output_flags = !a.redirects.empty() || !a.tee.empty() || !a.local_ranks_filter.empty();
  if (console_given && output_flags) {
    const char* which = !a.local_ranks_filter.empty() ? "--local-ranks-filter" : !a.redirects.empty() ? "--redirects"
                                                                                                      : "--tee";
    return fail(std::string("dtrain run: --console and ") + which +
                " both say whose output the console shows: give one of them");
  }
  if (output_flags) {
    const int shown = (~redirects | tee) & 3;  // the streams torchrun would show on the console
    if (shown != 0 && shown != 3) {
      r.notes.push_back("dtrain shows a rank's stdout and stderr together: --redirects/--tee that show one stream "
                        "show both");
    }
    if (shown == 0) {
      r.console = Resolved::Console::none;
    } else if (!a.local_ranks_filter.empty()) {
      std::set<int> locals;
      for (const auto& item : split(a.local_ranks_filter, ',')) {
        auto l = parse_int(item, 0, 1 << 16);
        if (!l || *l >= r.nproc) {
          return fail("dtrain run: --local-ranks-filter '" + a.local_ranks_filter +
                      "': each entry must be a local rank from 0 to " + std::to_string(r.nproc - 1));
        }
        locals.insert(static_cast<int>(*l));
      }
      r.console = Resolved::Console::ranks;
      r.console_local_ranks.assign(locals.begin(), locals.end());
      for (int node = 0; node < nodes; ++node) {
        for (int l : locals) r.console_ranks.push_back(node * r.nproc + l);
      }
    } else {
      r.console = Resolved::Console::all;
    }
  }
  if (!a.log_dir.empty()) {
    if (nodes > 1) {
      return fail("dtrain run: --log-dir lays files out for one node, as torchrun does; with --nodes " +
                  std::to_string(nodes) + " use dtrain's run directory (--logs-dir)");
    }
    r.log_dir = a.log_dir;
  }

  // The program.
  if (a.module && a.no_python) return fail("dtrain run: -m/--module and --no-python conflict: give one of them");
  if (program.empty()) {
    return fail(std::string("dtrain run: no program: give a script (dtrain run [OPTIONS] script.py ARGS), ") +
                "-m MODULE ARGS, --no-python PROGRAM ARGS, or -- CMD ARGS");
  }
  if (dashdash) {
    if (a.module || a.run_path) {
      return fail(std::string("dtrain run: ") + (a.module ? "-m/--module" : "--run-path") +
                  " with `-- CMD ARGS`: CMD runs as it is; give the module or script without `--`");
    }
    r.command = program;
  } else if (a.no_python) {
    r.command = program;
  } else {
    r.command = {host.python, "-u"};  // as torchrun: [sys.executable, "-u", ...]
    if (a.module) r.command.push_back("-m");
    r.command.insert(r.command.end(), program.begin(), program.end());
  }
  return r;
}

}  // namespace dtrain::cli::run

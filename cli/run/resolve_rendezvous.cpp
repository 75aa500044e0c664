// The steps of the rendezvous options (--rdzv-backend, --rdzv-endpoint, --rdzv-conf, --master-addr,
// --master-port) and of the options dtrain takes with a note or refuses (--monitor-interval, --start-method, --role,
// --max-restarts); see option_table.h.

#include <set>

#include "cli/run/multi_node_checks.h"
#include "cli/run/option_table.h"
#include "cli/run/option_values.h"

namespace dtrain::cli::run {
namespace {

const char* const kMultiNode =
    "that is another machine: a job across machines is --nnodes N (or MIN:MAX) with the same command on every node "
    "(README \"Coming from torchrun\")";

bool unresolvable(const std::string& why) { return why.rfind("cannot be resolved", 0) == 0; }

// Multi-node: the endpoint's option, its text, host and port (torchrun's defaults), or the refusal.
struct Endpoint {
  std::string option, text, host;
  int port = 0;
};
std::string multi_node_source(const Resolution& res, Endpoint& ep) {
  const TorchrunArgs& a = res.a;
  const auto& m = *res.r.multi;
  const std::string nnodes = m.min_nodes == m.max_nodes
                                 ? std::to_string(m.max_nodes)
                                 : std::to_string(m.min_nodes) + ":" + std::to_string(m.max_nodes);
  if (!a.rdzv_endpoint.empty()) {
    ep = {"--rdzv-endpoint", a.rdzv_endpoint, "", 0};
    if (auto why = split_endpoint(ep.text, ep.host, ep.port); !why.empty()) {
      return "dtrain run: --rdzv-endpoint '" + ep.text + "': " + why + " (expected HOST[:PORT])";
    }
    if (ep.port == 0) ep.port = 29400;  // torchrun's c10d default
    return "";
  }
  if (!a.master_addr.empty()) {
    ep = {"--master-addr", a.master_addr, a.master_addr, 29500};  // torchrun's MASTER_PORT default
    if (a.master_port.empty()) return "";
    auto p = parse_int(a.master_port, 1, 65535);
    if (!p) return "dtrain run: --master-port must be a number from 1 to 65535 with --nnodes (got '" + a.master_port + "')";
    ep.port = static_cast<int>(*p);
    return "";
  }
  if (!res.host.slurm_node_id.empty()) {
    const std::string first = res.host.slurm_first_host ? res.host.slurm_first_host() : "";
    ep = {"the Slurm allocation's first host", first, first, 29400};
    if (!first.empty()) return "";
    return "dtrain run: --nnodes " + nnodes + " under Slurm: the allocation's first host could not be had from "
           "SLURM_JOB_NODELIST (scontrol show hostnames); give --rdzv-endpoint HOST[:PORT]";
  }
  return "dtrain run: --nnodes " + nnodes + " needs --rdzv-endpoint HOST[:PORT] (or --master-addr HOST): the "
         "same command on every node, and the node that owns HOST runs the launcher the others join";
}

// Multi-node: where the launcher listens, and whether this node runs it.
std::string multi_node_endpoint(Resolution& res) {
  Endpoint ep;
  if (auto why = multi_node_source(res, ep); !why.empty()) return why;
  auto& m = *res.r.multi;
  const std::string why_local = res.host.local_host(ep.host);
  if (unresolvable(why_local)) return "dtrain run: " + ep.option + " " + ep.text + ": host '" + ep.host + "' " + why_local;
  m.launcher = m.node_rank ? *m.node_rank == 0 : why_local.empty();
  if (m.launcher && !why_local.empty()) {
    return "dtrain run: --node-rank 0 runs the launcher, which listens on " + ep.option + " " + ep.text + ", but '" +
           ep.host + "' " + why_local + "; run node rank 0 on that machine, or point the endpoint at this one";
  }
  if (m.launcher) {
    if (auto why = res.host.port_free(ep.host, ep.port); !why.empty()) {
      return "dtrain run: " + ep.option + " " + ep.text + ": port " + std::to_string(ep.port) + " " + why +
             " on this machine, where the launcher would listen; give a free port on every node";
    }
  }
  const bool v6 = ep.host.find(':') != std::string::npos;
  m.endpoint = (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port);
  return "";
}

// One node: the endpoint must name this machine, and its port be free where torchrun's c10d store would bind it.
std::string one_node_endpoint(Resolution& res) {
  const std::string& text = res.a.rdzv_endpoint;
  std::string host;
  int port = 0;
  if (auto why = split_endpoint(text, host, port); !why.empty()) {
    return "dtrain run: --rdzv-endpoint '" + text + "': " + why + " (expected HOST[:PORT])";
  }
  if (res.a.standalone) {
    res.r.notes.push_back("--standalone runs on this machine: --rdzv-endpoint " + text +
                          " is ignored, as torchrun ignores it");
    return "";
  }
  if (auto why = res.host.local_host(host); !why.empty()) {
    if (unresolvable(why)) return "dtrain run: --rdzv-endpoint " + text + ": host '" + host + "' " + why;
    return "dtrain run: --rdzv-endpoint " + text + ": '" + host + "' " + why + "; " + kMultiNode;
  }
  if (!res.c10d && !res.a.rdzv_backend.empty()) return "";
  if (port == 0) port = 29400;  // torchrun's default c10d port
  if (auto why = res.host.port_free(host, port); !why.empty()) {
    return "dtrain run: --rdzv-endpoint " + text + ": port " + std::to_string(port) + " " + why +
           " (torchrun's c10d store would bind it); give a free port or leave the option out";
  }
  return "";
}

}  // namespace

std::string resolve_rdzv_backend(Resolution& res) {
  const std::string& backend = res.a.rdzv_backend;
  res.c10d = backend == "c10d" || (backend.empty() && res.a.standalone);
  if (backend.empty() || backend == "c10d" || backend == "static") return "";
  if (backend == "etcd" || backend == "etcd-v2") {
    return "dtrain run: --rdzv-backend " + backend +
           ": dtrain's launcher is the rendezvous and uses no etcd server; give c10d or leave it out";
  }
  return "dtrain run: --rdzv-backend must be c10d or static (got '" + backend + "')";
}

std::string resolve_rdzv_endpoint(Resolution& res) {
  if (res.r.multi) return multi_node_endpoint(res);
  return res.a.rdzv_endpoint.empty() ? "" : one_node_endpoint(res);
}

std::string resolve_rdzv_conf(Resolution& res) {
  static const std::set<std::string> ignored = {"last_call_timeout", "close_timeout",       "timeout",
                                                "is_host",           "keep_alive_interval", "keep_alive_max_attempt"};
  if (res.a.rdzv_conf.empty()) return "";
  for (const auto& item : split(res.a.rdzv_conf, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      return "dtrain run: --rdzv-conf '" + item + "': expected KEY=VALUE (join_timeout=S, read_timeout=S)";
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "join_timeout" || key == "read_timeout") {
      auto s = parse_seconds(value);
      if (!s || *s <= 0) return "dtrain run: --rdzv-conf " + key + " must be seconds > 0 (got '" + value + "')";
      if (auto why = check_rdzv_timeout(key, value, *s); !why.empty()) return why;
      (key == "join_timeout" ? res.r.join_timeout_s : res.r.node_timeout_s) = *s;
    } else if (ignored.count(key)) {
      res.r.notes.push_back("--rdzv-conf " + key + " has no dtrain meaning; ignored");
    } else {
      return "dtrain run: --rdzv-conf key '" + key +
             "' is not known; dtrain takes join_timeout (nodes.join_timeout_s) and read_timeout "
             "(health.node_timeout_s)";
    }
  }
  return "";
}

std::string resolve_master_addr(Resolution& res) {
  const std::string& addr = res.a.master_addr;
  if (addr.empty() || res.r.multi) return "";
  const std::string why = res.host.local_host(addr);
  if (why.empty()) return "";
  if (unresolvable(why)) return "dtrain run: --master-addr '" + addr + "' " + why;
  return "dtrain run: --master-addr " + addr + " " + why + "; " + kMultiNode;
}

std::string resolve_master_port(Resolution& res) {
  const std::string& text = res.a.master_port;
  if (text.empty()) return "";
  auto port = parse_int(text, 0, 65535);
  if (!port) return "dtrain run: --master-port must be a number from 0 to 65535 (got '" + text + "')";
  if (*port != 0 && !res.c10d && !res.r.multi) {
    const std::string addr = res.a.master_addr.empty() ? "127.0.0.1" : res.a.master_addr;
    if (auto why = res.host.port_free(addr, static_cast<int>(*port)); !why.empty()) {
      return "dtrain run: --master-port " + text + " " + why + " on " + addr +
             " (torchrun's static rendezvous would bind it); give a free port or leave the option out";
    }
  }
  res.r.notes.push_back("--master-port is not MASTER_PORT's value: dtrain's agent reserves a free port for it");
  return "";
}

std::string resolve_monitor_interval(Resolution& res) {
  const std::string& text = res.a.monitor_interval;
  if (text.empty()) return "";
  if (!parse_seconds(text)) return "dtrain run: --monitor-interval must be seconds >= 0 (got '" + text + "')";
  res.r.notes.push_back("--monitor-interval has no effect: dtrain does not poll its workers, it sees each exit at once");
  return "";
}

std::string resolve_start_method(Resolution& res) {
  const std::string& method = res.a.start_method;
  if (method.empty() || method == "spawn") return "";
  if (method != "fork" && method != "forkserver") {
    return "dtrain run: --start-method must be spawn, fork or forkserver (got '" + method + "')";
  }
  res.r.notes.push_back("--start-method " + method + ": every dtrain worker is a new process its agent execs, as with spawn");
  return "";
}

std::string resolve_role(Resolution& res) {
  if (res.a.role.empty() || res.a.role == "default") return "";
  return "dtrain run: --role " + res.a.role +
         ": dtrain runs one role per job, named 'default' (ROLE_NAME); leave --role out";
}

std::string resolve_max_restarts(Resolution& res) {
  auto n = parse_int(res.a.max_restarts, 0, 1 << 20);
  if (!n) return "dtrain run: --max-restarts must be a whole number >= 0 (got '" + res.a.max_restarts + "')";
  res.r.max_restarts = static_cast<int>(*n);
  return "";
}

}  // namespace dtrain::cli::run

#include "agent/node/doctor/cluster.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "agent/node/doctor/check_table.h"

namespace dtrain::node::doctor {
namespace {

std::string nccl_text(int code) {
  if (code == 0) return "none";
  // 22803 = 2.28.3; codes below 10000 are the old 2.x scheme (2708 = 2.7.8).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// "x on node 0, node 2; y on node 1" when the value differs, "" when every node agrees.
template <typename Value>
std::string differences(const std::vector<NodeFindings>& nodes, Value value) {
  std::map<std::string, std::string> by_value;
  for (const auto& n : nodes) {
    if (!n.answered) continue;
    auto& who = by_value[value(n)];
    who += (who.empty() ? "" : ", ") + n.node;
  }
  if (by_value.size() <= 1) return "";
  std::string out;
  for (const auto& [v, who] : by_value) out += (out.empty() ? "" : "; ") + v + " on " + who;
  return out;
}

std::string same_everywhere(const std::vector<NodeFindings>& nodes, const std::string& what, const std::string& value) {
  std::size_t answered = 0;
  for (const auto& n : nodes) answered += n.answered ? 1 : 0;
  return what + " " + value + " on all " + std::to_string(answered) + " nodes";
}

std::string first_value(const std::vector<NodeFindings>& nodes, std::string NodeFindings::*field) {
  for (const auto& n : nodes) {
    if (n.answered) return n.*field;
  }
  return "";
}

struct Cluster {
  const std::vector<NodeFindings>& nodes;
  const ClusterOptions& options;
};

using ClusterRow = CheckRow<Cluster>;

// cluster.master_port, cluster.agents: the connections each node made to `what`, as its `field` lists them.
ClusterRow reach_row(const std::string& id, std::vector<Reach> NodeFindings::*field, const std::string& what,
              const std::string& fix) {
  ClusterRow row{id, {}, {}, "", fix};
  row.skip = [field, what](const Cluster& c) -> std::optional<std::string> {
    bool tried = std::any_of(c.nodes.begin(), c.nodes.end(), [&](const NodeFindings& n) { return !(n.*field).empty(); });
    if (!tried) return "only one node: no " + what + " to reach";
    return std::nullopt;
  };
  row.evaluate = [field, what](const Cluster& c) -> Finding {
    std::string failures;
    std::size_t tried = 0;
    for (const auto& n : c.nodes) {
      for (const auto& r : n.*field) {
        ++tried;
        if (!r.ok) failures += (failures.empty() ? "" : "; ") + n.node + " -> " + r.address + ": " + r.error;
      }
    }
    if (!failures.empty()) return {Status::fail, failures};
    return {Status::pass, "every node reaches " + what + " (" + std::to_string(tried) + " connections)"};
  };
  return row;
}

Finding answered(const Cluster& c) {
  std::string silent;
  for (const auto& n : c.nodes) {
    if (!n.answered) silent += (silent.empty() ? "" : ", ") + n.node;
  }
  if (!silent.empty()) return {Status::fail, "no answer from " + silent};
  return {Status::pass, "all " + std::to_string(c.nodes.size()) + " nodes answered"};
}

Finding dtrain_version(const Cluster& c) {
  if (auto diff = differences(c.nodes, [](const NodeFindings& n) { return n.dtrain_version; }); !diff.empty()) {
    return {Status::fail, "dtrain versions differ: " + diff};
  }
  return {Status::pass, same_everywhere(c.nodes, "dtrain", first_value(c.nodes, &NodeFindings::dtrain_version))};
}

std::optional<std::string> no_driver(const Cluster& c) {
  if (std::any_of(c.nodes.begin(), c.nodes.end(), [](const auto& n) { return !n.driver_version.empty(); })) {
    return std::nullopt;
  }
  return "no node has an NVIDIA driver";
}

Finding driver_version(const Cluster& c) {
  if (auto diff = differences(c.nodes, [](const NodeFindings& n) {
        return n.driver_version.empty() ? std::string("no driver") : n.driver_version;
      });
      !diff.empty()) {
    return {Status::warn, "NVIDIA drivers differ: " + diff};
  }
  return {Status::pass, same_everywhere(c.nodes, "driver", first_value(c.nodes, &NodeFindings::driver_version))};
}

Finding nccl_version(const Cluster& c) {
  if (auto diff = differences(c.nodes, [](const NodeFindings& n) { return nccl_text(n.nccl_version); }); !diff.empty()) {
    return {Status::fail, "NCCL versions differ: " + diff};
  }
  int code = 0;
  for (const auto& n : c.nodes) code = n.answered ? n.nccl_version : code;
  return {Status::pass, same_everywhere(c.nodes, "NCCL", nccl_text(code))};
}

std::optional<std::string> no_clock(const Cluster& c) {
  if (std::any_of(c.nodes.begin(), c.nodes.end(), [](const NodeFindings& n) { return n.clock_offset_ms.has_value(); })) {
    return std::nullopt;
  }
  return "no clock readings";
}

Finding clock_skew(const Cluster& c) {
  std::optional<double> lo, hi;
  std::string lo_node, hi_node;
  for (const auto& n : c.nodes) {
    if (!n.clock_offset_ms) continue;
    if (!lo || *n.clock_offset_ms < *lo) lo = n.clock_offset_ms, lo_node = n.node;
    if (!hi || *n.clock_offset_ms > *hi) hi = n.clock_offset_ms, hi_node = n.node;
  }
  char text[200];
  if (*hi - *lo < 1) {
    std::snprintf(text, sizeof text, "clocks agree within 1 ms");
  } else {
    std::snprintf(text, sizeof text, "clocks differ by %.0f ms at most (%s is ahead of %s)", *hi - *lo,
                  hi_node.c_str(), lo_node.c_str());
  }
  return {*hi - *lo > c.options.max_clock_skew_ms ? Status::warn : Status::pass, text};
}

std::optional<std::string> no_interface(const Cluster& c) {
  if (!c.options.interface.empty()) return std::nullopt;
  return "nodes.interface is not set: each node talks over the interface its agent advertises";
}

Finding interface(const Cluster& c) {
  const std::string& wanted = c.options.interface;
  std::string missing;
  for (const auto& n : c.nodes) {
    if (n.answered && std::find(n.interfaces.begin(), n.interfaces.end(), wanted) == n.interfaces.end()) {
      missing += (missing.empty() ? "" : ", ") + n.node;
    }
  }
  if (!missing.empty()) return {Status::fail, "no IPv4 address on " + wanted + " on " + missing};
  return {Status::pass, wanted + " has an IPv4 address on every node"};
}

const std::vector<ClusterRow>& cluster_rows() {
  static const std::vector<ClusterRow> rows = {
      {"cluster.answered", {}, answered, "", "check those agents' logs; the node checks of the others are below"},
      {"cluster.dtrain_version", {}, dtrain_version, "",
       "install the same dtrain on every node (the session protocol may differ between versions)"},
      {"cluster.driver_version", no_driver, driver_version,
       "run one driver version on every node of a job; mixed drivers are a common source of NCCL errors", ""},
      {"cluster.nccl_version", {}, nccl_version, "",
       "use one NCCL on every node: ranks with different NCCL versions can hang in their first collective"},
      {"cluster.clock_skew", no_clock, clock_skew,
       "run NTP or chrony on every node: logs and timeouts of different nodes cannot be compared", ""},
      reach_row("cluster.master_port", &NodeFindings::master_port, "node 0's MASTER_PORT range",
                "open node 0's ephemeral TCP ports (ip_local_port_range) to the other nodes in the firewall"),
      reach_row("cluster.agents", &NodeFindings::agents, "every other node's agent",
                "allow TCP between the nodes on the agents' ports (workers reach node 0's store there)"),
      {"cluster.interface", no_interface, interface, "",
       "set nodes.interface to an interface every node has (dtrain topo lists them), or fix the network"},
  };
  return rows;
}

}  // namespace

std::vector<Check> cluster_checks(const std::vector<NodeFindings>& nodes, const ClusterOptions& options) {
  return run_checks(cluster_rows(), Cluster{nodes, options});
}

NodeReport parse_json(const std::string& text) {
  NodeReport report;
  try {
    const auto json = nlohmann::json::parse(text);
    report.node = json.at("node").get<std::string>();
    for (const auto& c : json.at("checks")) {
      Check check;
      check.id = c.at("id").get<std::string>();
      const std::string status = c.at("status").get<std::string>();
      check.status = status == "pass" ? Status::pass : status == "warn" ? Status::warn
                     : status == "fail" ? Status::fail : Status::skip;
      check.message = c.at("message").get<std::string>();
      check.fix = c.at("fix").get<std::string>();
      report.checks.push_back(std::move(check));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed node report: ") + e.what());
  }
  return report;
}

std::string render_job_json(const std::vector<NodeReport>& nodes, const std::vector<Check>& cluster) {
  auto checks_json = [](const std::vector<Check>& checks) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& c : checks) {
      out.push_back({{"id", c.id}, {"status", status_name(c.status)}, {"message", c.message}, {"fix", c.fix}});
    }
    return out;
  };
  nlohmann::ordered_json out;
  out["nodes"] = nlohmann::ordered_json::array();
  for (const auto& n : nodes) out["nodes"].push_back({{"node", n.node}, {"checks", checks_json(n.checks)}});
  out["cluster"] = {{"checks", checks_json(cluster)}};
  // Text from files, devices and the network is not always UTF-8; JSON must be, so bad bytes become U+FFFD
  // instead of an exception.
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace dtrain::node::doctor

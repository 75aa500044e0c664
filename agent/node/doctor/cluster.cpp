#include "agent/node/doctor/cluster.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

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

Check reach_check(const std::string& id, const std::vector<NodeFindings>& nodes,
                  std::vector<Reach> NodeFindings::*field, const std::string& what, const std::string& fix) {
  std::string failures;
  std::size_t tried = 0;
  for (const auto& n : nodes) {
    for (const auto& r : n.*field) {
      ++tried;
      if (!r.ok) failures += (failures.empty() ? "" : "; ") + n.node + " -> " + r.address + ": " + r.error;
    }
  }
  if (tried == 0) return {id, Status::skip, "only one node: no " + what + " to reach", ""};
  if (!failures.empty()) return {id, Status::fail, failures, fix};
  return {id, Status::pass, "every node reaches " + what + " (" + std::to_string(tried) + " connections)", ""};
}

}  // namespace

std::vector<Check> cluster_checks(const std::vector<NodeFindings>& nodes, const ClusterOptions& options) {
  std::vector<Check> out;
  std::string silent;
  for (const auto& n : nodes) {
    if (!n.answered) silent += (silent.empty() ? "" : ", ") + n.node;
  }
  if (!silent.empty()) {
    out.push_back({"cluster.answered", Status::fail, "no answer from " + silent,
                   "check those agents' logs; the node checks of the others are below"});
  } else {
    out.push_back({"cluster.answered", Status::pass, "all " + std::to_string(nodes.size()) + " nodes answered", ""});
  }

  if (auto diff = differences(nodes, [](const NodeFindings& n) { return n.dtrain_version; }); !diff.empty()) {
    out.push_back({"cluster.dtrain_version", Status::fail, "dtrain versions differ: " + diff,
                   "install the same dtrain on every node (the session protocol may differ between versions)"});
  } else {
    out.push_back({"cluster.dtrain_version", Status::pass,
                   same_everywhere(nodes, "dtrain", first_value(nodes, &NodeFindings::dtrain_version)), ""});
  }

  const bool any_driver = std::any_of(nodes.begin(), nodes.end(), [](const auto& n) { return !n.driver_version.empty(); });
  if (!any_driver) {
    out.push_back({"cluster.driver_version", Status::skip, "no node has an NVIDIA driver", ""});
  } else if (auto diff = differences(nodes, [](const NodeFindings& n) {
               return n.driver_version.empty() ? std::string("no driver") : n.driver_version;
             });
             !diff.empty()) {
    out.push_back({"cluster.driver_version", Status::warn, "NVIDIA drivers differ: " + diff,
                   "run one driver version on every node of a job; mixed drivers are a common source of NCCL errors"});
  } else {
    out.push_back({"cluster.driver_version", Status::pass,
                   same_everywhere(nodes, "driver", first_value(nodes, &NodeFindings::driver_version)), ""});
  }

  if (auto diff = differences(nodes, [](const NodeFindings& n) { return nccl_text(n.nccl_version); }); !diff.empty()) {
    out.push_back({"cluster.nccl_version", Status::fail, "NCCL versions differ: " + diff,
                   "use one NCCL on every node: ranks with different NCCL versions can hang in their first collective"});
  } else {
    int code = 0;
    for (const auto& n : nodes) code = n.answered ? n.nccl_version : code;
    out.push_back({"cluster.nccl_version", Status::pass, same_everywhere(nodes, "NCCL", nccl_text(code)), ""});
  }

  std::optional<double> lo, hi;
  std::string lo_node, hi_node;
  for (const auto& n : nodes) {
    if (!n.clock_offset_ms) continue;
    if (!lo || *n.clock_offset_ms < *lo) lo = n.clock_offset_ms, lo_node = n.node;
    if (!hi || *n.clock_offset_ms > *hi) hi = n.clock_offset_ms, hi_node = n.node;
  }
  if (!lo) {
    out.push_back({"cluster.clock_skew", Status::skip, "no clock readings", ""});
  } else {
    char text[200];
    if (*hi - *lo < 1) {
      std::snprintf(text, sizeof text, "clocks agree within 1 ms");
    } else {
      std::snprintf(text, sizeof text, "clocks differ by %.0f ms at most (%s is ahead of %s)", *hi - *lo,
                    hi_node.c_str(), lo_node.c_str());
    }
    if (*hi - *lo > options.max_clock_skew_ms) {
      out.push_back({"cluster.clock_skew", Status::warn, text,
                     "run NTP or chrony on every node: logs and timeouts of different nodes cannot be compared"});
    } else {
      out.push_back({"cluster.clock_skew", Status::pass, text, ""});
    }
  }

  out.push_back(reach_check("cluster.master_port", nodes, &NodeFindings::master_port, "node 0's MASTER_PORT range",
                            "open node 0's ephemeral TCP ports (ip_local_port_range) to the other nodes in the firewall"));
  out.push_back(reach_check("cluster.agents", nodes, &NodeFindings::agents, "every other node's agent",
                            "allow TCP between the nodes on the agents' ports (workers reach node 0's store there)"));

  if (options.interface.empty()) {
    out.push_back({"cluster.interface", Status::skip,
                   "nodes.interface is not set: each node talks over the interface its agent advertises", ""});
  } else {
    std::string missing;
    for (const auto& n : nodes) {
      if (n.answered && std::find(n.interfaces.begin(), n.interfaces.end(), options.interface) == n.interfaces.end()) {
        missing += (missing.empty() ? "" : ", ") + n.node;
      }
    }
    if (!missing.empty()) {
      out.push_back({"cluster.interface", Status::fail, "no IPv4 address on " + options.interface + " on " + missing,
                     "set nodes.interface to an interface every node has (dtrain topo lists them), or fix the network"});
    } else {
      out.push_back({"cluster.interface", Status::pass, options.interface + " has an IPv4 address on every node", ""});
    }
  }
  return out;
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

#include "agent/node/doctor/checks.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace dtrain::node::doctor {

const char* status_name(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::warn: return "warn";
    case Status::fail: return "fail";
    case Status::skip: return "skip";
  }
  return "skip";
}

bool NodeReport::failed() const {
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.status == Status::fail; });
}

NodeReport run_node_checks(const DoctorInputs& in) {
  NodeReport report;
  report.node = in.node;
  for (auto group : {gpu_checks(in), system_checks(in)}) {
    report.checks.insert(report.checks.end(), group.begin(), group.end());
  }
  std::vector<std::string> interfaces;
  for (const auto& n : in.host.net) interfaces.push_back(n.name);
  auto env = lint_env(in.env, interfaces);
  report.checks.insert(report.checks.end(), env.begin(), env.end());
  return report;
}

std::string render_table(const NodeReport& report) {
  std::size_t width = 6;
  for (const auto& c : report.checks) width = std::max(width, c.id.size());
  auto pad = [](std::string s, std::size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); };
  std::string out = "dtrain doctor: " + report.node + "\n\n" + pad("CHECK", width + 2) + "STATUS  FINDING\n";
  int counts[4] = {0, 0, 0, 0};
  for (const auto& c : report.checks) {
    ++counts[static_cast<int>(c.status)];
    out += pad(c.id, width + 2) + pad(status_name(c.status), 8) + c.message + "\n";
    if (!c.fix.empty() && (c.status == Status::warn || c.status == Status::fail)) {
      out += std::string(width + 10, ' ') + "fix: " + c.fix + "\n";
    }
  }
  out += "\n" + std::to_string(counts[0]) + " pass, " + std::to_string(counts[1]) + " warn, " +
         std::to_string(counts[2]) + " fail, " + std::to_string(counts[3]) + " skip\n";
  return out;
}

std::string render_json(const NodeReport& report) {
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  for (const auto& c : report.checks) {
    checks.push_back({{"id", c.id}, {"status", status_name(c.status)}, {"message", c.message}, {"fix", c.fix}});
  }
  nlohmann::ordered_json out = {{"node", report.node}, {"checks", checks}};
  // Text from files, devices and the network is not always UTF-8; JSON must be, so bad bytes become U+FFFD
  // instead of an exception.
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace dtrain::node::doctor

// Environment lint: variables that PyTorch renamed, NCCL debugging switches left on, NCCL_IB_HCA prefix matching,
// NCCL_SOCKET_IFNAME naming no interface here. One row per variable (check_table.h); a row reports only a finding.

#include <algorithm>
#include <sstream>

#include "agent/node/doctor/check_table.h"

namespace dtrain::node::doctor {
namespace {

struct Renamed {
  const char* old_name;
  const char* new_name;
};

// PyTorch 2.2 moved its ProcessGroupNCCL settings under TORCH_NCCL_; the old names are deprecated.
constexpr Renamed kRenamed[] = {
    {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"},
    {"NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"},
    {"NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"},
    {"NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"},
    {"NCCL_ENABLE_MONITORING", "TORCH_NCCL_ENABLE_MONITORING"},
    {"NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"},
    {"NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"},
};

struct Switch {
  const char* name;
  const char* bad_value;  // the value that turns the switch on
  const char* effect;
};

// Switches people set to debug and forget: each cuts performance on every job.
constexpr Switch kDebugSwitches[] = {
    {"NCCL_P2P_DISABLE", "1", "GPUs cannot use NVLink/PCIe peer access: intra-node bandwidth collapses"},
    {"NCCL_SHM_DISABLE", "1", "intra-node transfers lose shared memory"},
    {"NCCL_IB_DISABLE", "1", "InfiniBand/RoCE is off: inter-node traffic goes over TCP"},
    {"CUDA_LAUNCH_BLOCKING", "1", "every CUDA kernel launch waits for completion"},
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

struct Environment {
  const std::map<std::string, std::string>& env;
  const std::vector<std::string>& interfaces;  // this node's network interfaces

  const std::string* get(const std::string& key) const {
    auto it = env.find(key);
    return it == env.end() ? nullptr : &it->second;
  }
};

using EnvRow = CheckRow<Environment>;
// What a variable's value is wrong for, or nullopt when it is fine.
using Lint = std::function<std::optional<Finding>(const std::string& value, const Environment& environment)>;

// The row env.<variable>: silent while the variable is unset.
EnvRow variable_row(const std::string& variable, Lint lint, std::string warn_fix = "", std::string fail_fix = "") {
  EnvRow row{"env." + variable, {}, {}, std::move(warn_fix), std::move(fail_fix)};
  row.evaluate = [variable, lint = std::move(lint)](const Environment& e) -> std::optional<Finding> {
    const std::string* value = e.get(variable);
    if (!value) return std::nullopt;
    return lint(*value, e);
  };
  return row;
}

EnvRow renamed_row(const Renamed& r) {
  return variable_row(r.old_name, [r](const std::string& old_value, const Environment& e) -> std::optional<Finding> {
    const std::string* new_value = e.get(r.new_name);
    return Finding{Status::warn,
                   std::string(r.old_name) + " is deprecated" +
                       (new_value ? " and ignored: " + std::string(r.new_name) + "=" + *new_value + " is set too"
                                  : ": recent PyTorch warns and may ignore it"),
                   std::string("use ") + r.new_name + "=" + old_value + " and unset " + r.old_name};
  });
}

EnvRow switch_row(const Switch& s) {
  return variable_row(
      s.name,
      [s](const std::string& v, const Environment&) -> std::optional<Finding> {
        if (v != s.bad_value) return std::nullopt;
        return Finding{Status::warn, std::string(s.name) + "=" + v + ": " + s.effect};
      },
      std::string("unset ") + s.name + " unless this node really needs it");
}

std::optional<Finding> avoid_record_streams(const std::string& v, const Environment&) {
  return Finding{Status::warn, "TORCH_NCCL_AVOID_RECORD_STREAMS=" + v +
                                   " is deprecated: recent PyTorch avoids recordStream in collectives by itself"};
}

std::optional<Finding> nccl_debug(const std::string& v, const Environment&) {
  std::string level = upper(v);
  if (level != "INFO" && level != "TRACE") return std::nullopt;
  return Finding{Status::warn, "NCCL_DEBUG=" + v + " left on: every rank logs its setup (and TRACE every call)"};
}

std::optional<Finding> nccl_debug_subsys(const std::string& v, const Environment&) {
  return Finding{Status::warn, "NCCL_DEBUG_SUBSYS=" + v + " left on (debug logging)"};
}

std::optional<Finding> torch_distributed_debug(const std::string& v, const Environment&) {
  if (upper(v) != "DETAIL" && upper(v) != "INFO") return std::nullopt;
  return Finding{Status::warn, "TORCH_DISTRIBUTED_DEBUG=" + v + " left on: extra checks and logging on every collective"};
}

std::optional<Finding> nccl_ib_hca(const std::string& v, const Environment&) {
  bool exclude = !v.empty() && v[0] == '^';
  std::string rest = exclude ? v.substr(1) : v;
  if (rest.empty() || rest[0] == '=') return std::nullopt;
  return Finding{Status::warn,
                 "NCCL_IB_HCA=" + v + " matches by prefix: mlx5_1 also " + (exclude ? "excludes" : "selects") +
                     " mlx5_10, mlx5_11, ...",
                 "use exact names: NCCL_IB_HCA=" + std::string(exclude ? "^" : "") + "=" + rest};
}

std::optional<Finding> nccl_socket_ifname(const std::string& v, const Environment& e) {
  std::string list = v;
  if (e.interfaces.empty() || list.empty() || list[0] == '^') return std::nullopt;
  bool exact = list[0] == '=';
  if (exact) list.erase(0, 1);
  for (const auto& want : split(list, ',')) {
    for (const auto& have : e.interfaces) {
      if (exact ? have == want : have.rfind(want, 0) == 0) return std::nullopt;
    }
  }
  return Finding{Status::fail, "NCCL_SOCKET_IFNAME=" + v + " matches no interface of this node (" +
                                   join_list(e.interfaces) + ")"};
}

const std::vector<EnvRow>& env_rows() {
  static const std::vector<EnvRow> rows = [] {
    std::vector<EnvRow> rows;
    for (const auto& r : kRenamed) rows.push_back(renamed_row(r));
    rows.push_back(variable_row("TORCH_NCCL_AVOID_RECORD_STREAMS", avoid_record_streams,
                                "unset TORCH_NCCL_AVOID_RECORD_STREAMS"));
    rows.push_back(variable_row("NCCL_DEBUG", nccl_debug,
                                "unset NCCL_DEBUG or set NCCL_DEBUG=WARN; turn INFO on only while debugging"));
    rows.push_back(variable_row("NCCL_DEBUG_SUBSYS", nccl_debug_subsys, "unset NCCL_DEBUG_SUBSYS"));
    rows.push_back(variable_row("TORCH_DISTRIBUTED_DEBUG", torch_distributed_debug, "unset TORCH_DISTRIBUTED_DEBUG"));
    for (const auto& s : kDebugSwitches) rows.push_back(switch_row(s));
    rows.push_back(variable_row("NCCL_IB_HCA", nccl_ib_hca));
    rows.push_back(variable_row("NCCL_SOCKET_IFNAME", nccl_socket_ifname, "",
                                "set it to the interface the nodes reach each other on, or unset it"));
    return rows;
  }();
  return rows;
}

}  // namespace

std::vector<Check> lint_env(const std::map<std::string, std::string>& env, const std::vector<std::string>& interfaces) {
  std::vector<Check> out = run_checks(env_rows(), Environment{env, interfaces});
  if (out.empty()) out.push_back({"env", Status::pass, "no deprecated or leftover NCCL/PyTorch variable", ""});
  return out;
}

}  // namespace dtrain::node::doctor

// Environment lint: variables that PyTorch renamed, NCCL debugging switches left on, NCCL_IB_HCA prefix matching,
// NCCL_SOCKET_IFNAME naming no interface here.

#include <algorithm>
#include <sstream>

#include "agent/node/doctor/checks.h"

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

}  // namespace

std::vector<Check> lint_env(const std::map<std::string, std::string>& env, const std::vector<std::string>& interfaces) {
  std::vector<Check> out;
  auto get = [&](const std::string& key) -> const std::string* {
    auto it = env.find(key);
    return it == env.end() ? nullptr : &it->second;
  };

  for (const auto& r : kRenamed) {
    const std::string* old_value = get(r.old_name);
    if (!old_value) continue;
    const std::string* new_value = get(r.new_name);
    out.push_back({std::string("env.") + r.old_name, Status::warn,
                   std::string(r.old_name) + " is deprecated" +
                       (new_value ? " and ignored: " + std::string(r.new_name) + "=" + *new_value + " is set too"
                                  : ": recent PyTorch warns and may ignore it"),
                   std::string("use ") + r.new_name + "=" + *old_value + " and unset " + r.old_name});
  }
  if (const std::string* v = get("TORCH_NCCL_AVOID_RECORD_STREAMS")) {
    out.push_back({"env.TORCH_NCCL_AVOID_RECORD_STREAMS", Status::warn,
                   "TORCH_NCCL_AVOID_RECORD_STREAMS=" + *v +
                       " is deprecated: recent PyTorch avoids recordStream in collectives by itself",
                   "unset TORCH_NCCL_AVOID_RECORD_STREAMS"});
  }
  if (const std::string* v = get("NCCL_DEBUG")) {
    std::string level = upper(*v);
    if (level == "INFO" || level == "TRACE") {
      out.push_back({"env.NCCL_DEBUG", Status::warn,
                     "NCCL_DEBUG=" + *v + " left on: every rank logs its setup (and TRACE every call)",
                     "unset NCCL_DEBUG or set NCCL_DEBUG=WARN; turn INFO on only while debugging"});
    }
  }
  if (const std::string* v = get("NCCL_DEBUG_SUBSYS")) {
    out.push_back({"env.NCCL_DEBUG_SUBSYS", Status::warn, "NCCL_DEBUG_SUBSYS=" + *v + " left on (debug logging)",
                   "unset NCCL_DEBUG_SUBSYS"});
  }
  if (const std::string* v = get("TORCH_DISTRIBUTED_DEBUG")) {
    if (upper(*v) == "DETAIL" || upper(*v) == "INFO") {
      out.push_back({"env.TORCH_DISTRIBUTED_DEBUG", Status::warn,
                     "TORCH_DISTRIBUTED_DEBUG=" + *v + " left on: extra checks and logging on every collective",
                     "unset TORCH_DISTRIBUTED_DEBUG"});
    }
  }
  for (const auto& s : kDebugSwitches) {
    const std::string* v = get(s.name);
    if (v && *v == s.bad_value) {
      out.push_back({std::string("env.") + s.name, Status::warn, std::string(s.name) + "=" + *v + ": " + s.effect,
                     std::string("unset ") + s.name + " unless this node really needs it"});
    }
  }
  if (const std::string* v = get("NCCL_IB_HCA")) {
    bool exclude = !v->empty() && (*v)[0] == '^';
    std::string rest = exclude ? v->substr(1) : *v;
    if (!rest.empty() && rest[0] != '=') {
      out.push_back({"env.NCCL_IB_HCA", Status::warn,
                     "NCCL_IB_HCA=" + *v + " matches by prefix: mlx5_1 also " + (exclude ? "excludes" : "selects") +
                         " mlx5_10, mlx5_11, ...",
                     "use exact names: NCCL_IB_HCA=" + std::string(exclude ? "^" : "") + "=" + rest});
    }
  }
  if (const std::string* v = get("NCCL_SOCKET_IFNAME"); v && !interfaces.empty()) {
    std::string list = *v;
    if (!list.empty() && list[0] != '^') {
      bool exact = list[0] == '=';
      if (exact) list.erase(0, 1);
      bool any = false;
      for (const auto& want : split(list, ',')) {
        for (const auto& have : interfaces) {
          if (exact ? have == want : have.rfind(want, 0) == 0) any = true;
        }
      }
      if (!any) {
        std::string names;
        for (const auto& i : interfaces) names += (names.empty() ? "" : ", ") + i;
        out.push_back({"env.NCCL_SOCKET_IFNAME", Status::fail,
                       "NCCL_SOCKET_IFNAME=" + *v + " matches no interface of this node (" + names + ")",
                       "set it to the interface the nodes reach each other on, or unset it"});
      }
    }
  }
  if (out.empty()) {
    out.push_back({"env", Status::pass, "no deprecated or leftover NCCL/PyTorch variable", ""});
  }
  return out;
}

}  // namespace dtrain::node::doctor

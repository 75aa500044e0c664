#include "cli/spec/env_names.h"

#include <algorithm>
#include <array>

namespace dtrain::spec::detail {

bool valid_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool is_reserved_env(std::string_view name) {
  static constexpr std::array<std::string_view, 27> kReserved = {
      "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
      "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
      "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
      "DTRAIN_JOB_ID", "DTRAIN_NODE_RANK", "DTRAIN_STORE_ADDR", "DTRAIN_JOB_TOKEN", "DTRAIN_AGENT_ADDR",
      "DTRAIN_RESTART_COUNT", "DTRAIN_REPORT_TOKEN", "DTRAIN_HEALTH_INTERVAL_MS", "DTRAIN_HEALTH_SOCKET",
      "DTRAIN_STACKS_FILE", "DTRAIN_TUNE"};
  return std::find(kReserved.begin(), kReserved.end(), name) != kReserved.end();
}

}  // namespace dtrain::spec::detail

#pragma once
// The names of the metadata entries that workers' calls carry to their agent. Written once here, read by the
// agent's services (agent/service/call_metadata.h) and set by the C++ clients (the store client, the health
// reporter); the Python store client (worker/python/dtrain_store.py) spells the same name.

#include <string_view>

namespace dtrain {

// The round's job token (DTRAIN_JOB_TOKEN): selects the store namespace and ties a health report to its round.
inline constexpr std::string_view kTokenMetadata = "dtrain-token";
// The reporting rank's own DTRAIN_REPORT_TOKEN (health reports only).
inline constexpr std::string_view kReportTokenMetadata = "dtrain-report-token";

}  // namespace dtrain

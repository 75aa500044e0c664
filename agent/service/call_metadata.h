#pragma once
// The metadata entries that workers' calls carry, and the one way a handler reads them. Header-only: two short
// definitions that every service library can use without linking another.

#include <grpcpp/grpcpp.h>

#include <string_view>

namespace dtrain::agent {

// The round's job token (DTRAIN_JOB_TOKEN): selects the store namespace and ties a health report to its round.
inline constexpr std::string_view kTokenMetadata = "dtrain-token";
// The reporting rank's own DTRAIN_REPORT_TOKEN (health reports only).
inline constexpr std::string_view kReportTokenMetadata = "dtrain-report-token";

// The value of the call's metadata entry `name`; empty when the call carries none. Valid while the call lasts.
inline std::string_view call_metadata(const grpc::ServerContextBase& context, std::string_view name) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(grpc::string_ref(name.data(), name.size()));
  if (it == metadata.end()) return {};
  return {it->second.data(), it->second.size()};
}

}  // namespace dtrain::agent

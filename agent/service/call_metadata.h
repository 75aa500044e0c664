#pragma once
// The one way a handler reads the metadata entries that workers' calls carry (their names: common/grpc/metadata.h).
// Header-only: a short definition that every service library can use without linking another.

#include <grpcpp/grpcpp.h>

#include <string_view>

#include "common/grpc/metadata.h"

namespace dtrain::agent {

// The value of the call's metadata entry `name`; empty when the call carries none. Valid while the call lasts.
inline std::string_view call_metadata(const grpc::ServerContextBase& context, std::string_view name) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(grpc::string_ref(name.data(), name.size()));
  if (it == metadata.end()) return {};
  return {it->second.data(), it->second.size()};
}

}  // namespace dtrain::agent

#pragma once

#include <string_view>

namespace dtrain {

// The version string every binary reports (agents compare it in the session hello).
std::string_view version();

// Version of the session protocol (proto/dtrain/v1); a launcher refuses agents that speak another one.
inline constexpr std::string_view kProtocolVersion = "dtrain.v1";

}  // namespace dtrain

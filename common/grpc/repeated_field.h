#pragma once

// Copying between a protocol message's repeated fields and the domain's vectors, for the wire layers (agent/session/wire.*,
// cli/controller/transport/wire.*). Templates over any range, so this header pulls in no protobuf.

#include <cstddef>
#include <vector>

namespace dtrain {

// A repeated field's values as a vector of the same element type.
template <class Repeated>
auto copy_of(const Repeated& repeated) {
  return std::vector(repeated.begin(), repeated.end());
}

// A repeated field's messages, each turned into a domain value by `convert`.
template <class Repeated, class Convert>
auto convert_all(const Repeated& repeated, Convert convert) {
  std::vector<decltype(convert(*repeated.begin()))> out;
  out.reserve(static_cast<std::size_t>(repeated.size()));
  for (const auto& element : repeated) out.push_back(convert(element));
  return out;
}

// Appends a domain vector's values to a repeated field (`repeated`: its mutable_* accessor's result).
template <class Repeated, class Values>
void append(Repeated* repeated, const Values& values) {
  repeated->Add(values.begin(), values.end());
}

}  // namespace dtrain

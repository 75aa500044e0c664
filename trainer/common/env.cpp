#include "trainer/common/env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>

namespace dtrain::trainer {

Result<int> env_int(const char* name, int fallback, const std::string& hint) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return {{}, fallback};
  const std::string_view text(raw);
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return {Status(StatusCode::invalid_argument,
                   std::string(name) + "='" + std::string(text) + "' is not an integer; " + hint)};
  }
  return {{}, value};
}

}  // namespace dtrain::trainer

#include "trainer/common/env.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>
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

int openmp_threads(std::string& warning) {
  const char* raw = std::getenv("OMP_NUM_THREADS");
  if (raw == nullptr || *raw == '\0') return 0;
  const std::string_view text(raw);
  const std::string_view first = text.substr(0, text.find(','));
  int value = 0;
  const auto [end, error] = std::from_chars(first.data(), first.data() + first.size(), value);
  if (error != std::errc() || end != first.data() + first.size() || value <= 0) {
    warning = "OMP_NUM_THREADS='" + std::string(text) + "' is not a number of threads (as OpenMP reads it: N or a "
              "list N,M,...); using every core. Set it to a count, or use --threads";
    return 0;
  }
  return value;
}

int env_setting(const char* name, int fallback, int least, const std::string& hint) {
  const Result<int> value = env_int(name, fallback, hint);
  if (!value.ok()) throw std::invalid_argument(value.status.message());
  if (value.value < least) {
    const char* raw = std::getenv(name);
    throw std::invalid_argument(std::string(name) + "='" + (raw != nullptr ? raw : "") + "' is less than " +
                                std::to_string(least) + "; " + hint);
  }
  return value.value;
}

}  // namespace dtrain::trainer

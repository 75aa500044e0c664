#include "cli/plan/costs/units.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace dtrain::plan {
namespace {

// The suffix after the number must be one of these exactly.
constexpr std::pair<const char*, double> kUnits[] = {
    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
    {"B", 1.0},
};

}  // namespace

std::optional<double> parse_decimal(std::string_view text, std::size_t& used) {
  std::size_t at = 0;
  const auto digits = [&] {
    const std::size_t from = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    return at - from;
  };
  std::size_t mantissa = digits();
  if (at < text.size() && text[at] == '.') {
    ++at;
    mantissa += digits();
  }
  if (mantissa == 0) return std::nullopt;
  if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
    const std::size_t mark = at++;
    if (at < text.size() && (text[at] == '+' || text[at] == '-')) ++at;
    if (digits() == 0) at = mark;  // "5e" or "5eB": the number is 5, the rest is not part of it
  }
  // Only what was checked above reaches strtod, so it cannot take a hex or an infinity; it still says when the
  // value is past a double's range.
  const std::string number(text.substr(0, at));
  errno = 0;
  const double value = std::strtod(number.c_str(), nullptr);
  if (errno == ERANGE && !std::isfinite(value)) return std::nullopt;
  used = at;
  return value;
}

Result<double> parse_bytes(std::string_view text) {
  const std::string whole(text);
  const Status bad{StatusCode::invalid_argument,
                   "'" + whole + "' is not a size: give a positive decimal number with GB (1e9 bytes), GiB (2^30), "
                   "MB, MiB, TB or TiB, e.g. 80GB or 141GiB (a bare number is GB)"};
  std::size_t used = 0;
  const std::optional<double> number = parse_decimal(text, used);
  if (!number || *number <= 0) return {bad};
  std::string unit(text.substr(used));
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  std::optional<double> scale;
  if (unit.empty()) scale = 1e9;
  for (const auto& [name, bytes] : kUnits) {
    if (unit == name) scale = bytes;
  }
  if (!scale) return {bad};
  const double bytes = *number * *scale;
  if (bytes < kMinGpuMemoryBytes || !(bytes <= kMaxGpuMemoryBytes)) {
    return {{StatusCode::invalid_argument, "'" + whole + "' is " + (bytes < kMinGpuMemoryBytes ? "less" : "more") +
                                               " than a GPU's memory can be: give 1 MB to 1 PB (1e15 bytes)"}};
  }
  return {{}, bytes};
}

std::string format_gb(double bytes) {
  char text[48];
  if (bytes < 0.05e9 && bytes > 0) {
    std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  }
  return text;
}

std::string format_seconds(double seconds) {
  char text[48];
  if (seconds >= 1) {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(text, sizeof text, "%.1f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f us", seconds * 1e6);
  }
  return text;
}

}  // namespace dtrain::plan

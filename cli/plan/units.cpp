#include "cli/plan/units.h"

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

Result<double> parse_bytes(std::string_view text) {
  const std::string whole(text);
  const Status bad{StatusCode::invalid_argument,
                   "'" + whole + "' is not a size: give a positive number with GB (1e9 bytes), GiB (2^30), MB, MiB, "
                   "TB or TiB, e.g. 80GB or 141GiB (a bare number is GB)"};
  const char* begin = whole.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(number) || number <= 0) return {bad};
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  if (unit.empty()) return {{}, number * 1e9};
  for (const auto& [name, bytes] : kUnits) {
    if (unit == name) return {{}, number * bytes};
  }
  return {bad};
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

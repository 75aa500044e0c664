#include "trainer/comm/describe.h"

#include <cstdio>

namespace dtrain::trainer {

std::string describe_bytes(std::size_t bytes) {
  char size[32];
  std::snprintf(size, sizeof(size), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return size;
}

std::string describe_floats(std::size_t count) {
  return std::to_string(count) + " floats (" + describe_bytes(count * sizeof(float)) + ")";
}

std::string describe_seconds(std::chrono::milliseconds timeout) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(timeout.count()) / 1000);
  return text;
}

}  // namespace dtrain::trainer

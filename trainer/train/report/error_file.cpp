#include "trainer/train/report/error_file.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

namespace dtrain::trainer {
namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string error_file_json(const std::string& message) {
  return "{\"message\": {\"message\": " + json_string(message) + ", \"extraInfo\": {\"py_callstack\": " +
         json_string(message) + ", \"timestamp\": \"" + std::to_string(std::time(nullptr)) + "\"}}}\n";
}

void write_error_file(const std::string& message) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return;
  std::ofstream out(path, std::ios::trunc);
  out << error_file_json(message);
}

}  // namespace dtrain::trainer

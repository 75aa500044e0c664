#include "common/io/text_out.h"

#include <unistd.h>

#include <cerrno>

namespace dtrain {

std::string shell_quote(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

void write_whole(std::FILE* to, std::string_view text) {
  // Anything stdio still buffers goes first, so the order on the terminal or in the file stays the order of calls.
  std::fflush(to);
  const int fd = ::fileno(to);
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed terminal or a full disk: the launcher goes on, the log files still have it all
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace dtrain

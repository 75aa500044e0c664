#pragma once
// Cuts a byte stream (a worker's stdout or stderr) into lines.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace dtrain::supervisor {

// Splits bytes into lines without their '\n'. A line longer than `max_line` bytes is delivered in pieces of at most
// `max_line` bytes (so one runaway line cannot grow memory without bound); the rest of it continues as the next
// piece. A piece never ends inside a UTF-8 multi-byte character (it is cut up to 3 bytes early instead), so text
// that was valid UTF-8 stays valid piece by piece; bytes that are not UTF-8 are cut at the limit. Bytes after the
// last '\n' wait for more input, or for finish().
//
// `ends_line` tells a line that ended with '\n' (true) from a piece of a longer line or a last line without '\n'
// (false): writing each text followed by '\n' only when ends_line reproduces the input byte for byte.
class LineSplitter {
 public:
  using Emit = std::function<void(std::string_view text, bool ends_line)>;
  static constexpr std::size_t kDefaultMaxLine = 64 * 1024;

  explicit LineSplitter(std::size_t max_line = kDefaultMaxLine);

  // Calls `emit` for every line (or piece) completed by `data`. The view is valid only during the call.
  void feed(std::string_view data, const Emit& emit);
  // Delivers the pending partial line, if any (end of stream).
  void finish(const Emit& emit);
  // Bytes held back waiting for a '\n'.
  std::size_t pending() const { return partial_.size(); }

 private:
  std::size_t max_line_;
  std::string partial_;
};

}  // namespace dtrain::supervisor

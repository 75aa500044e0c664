#include "agent/supervisor/output/line_splitter.h"

#include <algorithm>

namespace dtrain::supervisor {
namespace {

// Length of the longest prefix of `text` that does not end inside a UTF-8 multi-byte character: when the last lead
// byte starts a sequence longer than what follows it, the cut moves before that lead byte. Never 0 for non-empty
// text (a piece must make progress), and bytes that are not UTF-8 at all are left where they are.
std::size_t utf8_cut(std::string_view text) {
  const std::size_t size = text.size();
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, size); ++back) {
    const auto byte = static_cast<unsigned char>(text[size - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead byte
    std::size_t length = 1;
    if ((byte & 0xE0) == 0xC0) length = 2;
    else if ((byte & 0xF0) == 0xE0) length = 3;
    else if ((byte & 0xF8) == 0xF0) length = 4;
    const std::size_t lead = size - back;
    return length > back && lead > 0 ? lead : size;
  }
  return size;
}

}  // namespace

LineSplitter::LineSplitter(std::size_t max_line) : max_line_(std::max<std::size_t>(max_line, 1)) {}

void LineSplitter::feed(std::string_view data, const Emit& emit) {
  while (!data.empty()) {
    const std::size_t room = max_line_ - partial_.size();
    const std::size_t newline = data.substr(0, room + 1).find('\n');
    if (newline != std::string_view::npos) {
      // A complete line: emit straight from the input when nothing is pending (the common case: no copy).
      if (partial_.empty()) {
        emit(data.substr(0, newline), true);
      } else {
        partial_.append(data.substr(0, newline));
        emit(partial_, true);
        partial_.clear();
      }
      data.remove_prefix(newline + 1);
      continue;
    }
    if (data.size() <= room) {
      // Keep up to max_line_ bytes: if the next byte is '\n', this is one whole line, not a piece and an empty line.
      partial_.append(data);
      return;
    }
    // No '\n' within the limit: deliver a piece of at most max_line_ bytes; a character cut in two stays pending.
    partial_.append(data.substr(0, room));
    data.remove_prefix(room);
    const std::size_t cut = utf8_cut(partial_);
    emit(std::string_view(partial_).substr(0, cut), false);
    partial_.erase(0, cut);
  }
}

void LineSplitter::finish(const Emit& emit) {
  if (partial_.empty()) return;
  emit(partial_, false);
  partial_.clear();
}

}  // namespace dtrain::supervisor

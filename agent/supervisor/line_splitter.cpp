#include "agent/supervisor/line_splitter.h"

#include <algorithm>

namespace dtrain::supervisor {

LineSplitter::LineSplitter(std::size_t max_line) : max_line_(std::max<std::size_t>(max_line, 1)) {}

void LineSplitter::feed(std::string_view data, const Emit& emit) {
  while (!data.empty()) {
    const std::size_t room = max_line_ - partial_.size();
    const std::size_t newline = data.substr(0, room + 1).find('\n');
    if (newline != std::string_view::npos) {
      // A complete line: emit straight from the input when nothing is pending (the common case: no copy).
      if (partial_.empty()) {
        emit(data.substr(0, newline));
      } else {
        partial_.append(data.substr(0, newline));
        emit(partial_);
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
    // No '\n' within the limit: deliver exactly max_line_ bytes as one piece.
    if (partial_.empty()) {
      emit(data.substr(0, room));
    } else {
      partial_.append(data.substr(0, room));
      emit(partial_);
      partial_.clear();
    }
    data.remove_prefix(room);
  }
}

void LineSplitter::finish(const Emit& emit) {
  if (partial_.empty()) return;
  emit(partial_);
  partial_.clear();
}

}  // namespace dtrain::supervisor

#include "common/io/terminal_text.h"

#include <cstdint>
#include <cstdio>

namespace dtrain {
namespace {

void append_escaped(std::string& out, unsigned char byte) {
  char text[5];
  std::snprintf(text, sizeof text, "\\x%02x", byte);
  out += text;
}

// The length of the valid UTF-8 sequence of two to four bytes that starts `text` and its code point, or 0 when it
// is not one (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, past U+10FFFF).
std::size_t utf8_sequence(std::string_view text, std::uint32_t& code_point) {
  const auto lead = static_cast<unsigned char>(text[0]);
  // The lead byte tells the length; each length has a smallest code point it may encode (below it: overlong).
  const std::size_t length = lead >= 0xc2 && lead <= 0xdf   ? 2
                             : lead >= 0xe0 && lead <= 0xef ? 3
                             : lead >= 0xf0 && lead <= 0xf4 ? 4
                                                            : 0;
  if (length == 0 || text.size() < length) return 0;
  constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  const std::uint32_t min = kMin[length];
  code_point = lead & (0x7f >> length);
  for (std::size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(text[i]);
    if ((next & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (next & 0x3f);
  }
  if (code_point < min || code_point > 0x10ffff || (code_point >= 0xd800 && code_point <= 0xdfff)) return 0;
  return length;
}

}  // namespace

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto byte = static_cast<unsigned char>(text[0]);
    if (byte == '\t' || (byte >= 0x20 && byte < 0x7f)) {
      out += static_cast<char>(byte);
      text.remove_prefix(1);
      continue;
    }
    std::uint32_t code_point = 0;
    const std::size_t length = byte >= 0x80 ? utf8_sequence(text, code_point) : 0;
    if (length == 0) {
      append_escaped(out, byte);
      text.remove_prefix(1);
      continue;
    }
    // U+0080-U+009F are the C1 controls (CSI is U+009B): terminals in UTF-8 mode may obey them too.
    for (std::size_t i = 0; i < length; ++i) {
      if (code_point <= 0x9f) append_escaped(out, static_cast<unsigned char>(text[i]));
      else out += text[i];
    }
    text.remove_prefix(length);
  }
  return out;
}

std::string terminal_safe_lines(std::string_view text) {
  std::string out;
  for (;;) {
    const std::size_t end = text.find('\n');
    out += terminal_safe(text.substr(0, end));
    if (end == std::string_view::npos) return out;
    out += '\n';
    text.remove_prefix(end + 1);
  }
}

}  // namespace dtrain

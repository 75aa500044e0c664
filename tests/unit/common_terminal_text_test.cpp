#include <doctest/doctest.h>

#include <string>

#include "common/io/terminal_text.h"

using dtrain::terminal_safe;

TEST_CASE("terminal text: ESC, BEL and the other C0 controls but tab are escaped; printable ASCII stays") {
  CHECK(terminal_safe("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07");
  CHECK(terminal_safe("\x1b[2J\x1b[H") == "\\x1b[2J\\x1b[H");
  CHECK(terminal_safe("a\tb") == "a\tb");
  CHECK(terminal_safe("line\r\nnext") == "line\\x0d\\x0anext");
  CHECK(terminal_safe(std::string("nul\0end", 7)) == "nul\\x00end");
  CHECK(terminal_safe("del\x7f") == "del\\x7f");
  CHECK(terminal_safe("C:\\path ~!@#$%^&*()") == "C:\\path ~!@#$%^&*()");
}

TEST_CASE("terminal text: valid UTF-8 stays, C1 controls and broken sequences are escaped byte by byte") {
  CHECK(terminal_safe("h\xc3\xa9llo \xe2\x96\x81 \xf0\x9f\x98\x80") == "h\xc3\xa9llo \xe2\x96\x81 \xf0\x9f\x98\x80");
  CHECK(terminal_safe("\xc2\x9b" "2J") == "\\xc2\\x9b2J");   // U+009B, CSI, encoded as UTF-8
  CHECK(terminal_safe("\x9b" "2J") == "\\x9b2J");            // CSI as one raw byte
  CHECK(terminal_safe("\xc2\xa0") == "\xc2\xa0");            // U+00A0, the first code point past C1
  CHECK(terminal_safe("\xc0\x9b") == "\\xc0\\x9b");          // overlong
  CHECK(terminal_safe("\xed\xa0\x80") == "\\xed\\xa0\\x80"); // a surrogate
  CHECK(terminal_safe("\xe2\x96") == "\\xe2\\x96");          // cut short
  CHECK(terminal_safe("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(terminal_safe("\xff") == "\\xff");
}

TEST_CASE("terminal text: applying it twice changes nothing more") {
  const std::string once = terminal_safe("\x1b[31mred\x07 \xc2\x9b \xff done");
  CHECK(terminal_safe(once) == once);
}

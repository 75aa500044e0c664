#pragma once

// The one rule for showing bytes that someone else wrote (a worker's stderr and reports, an agent's messages, a run
// directory's files) on a terminal: a terminal obeys control characters, so a worker that prints ESC or BEL could
// retitle, clear or rewrite the user's screen through the launcher's summary or `dtrain status`.

#include <string>
#include <string_view>

namespace dtrain {

// `text` with every byte a terminal could act on written as `\xNN` (lower-case hex): the C0 controls but tab
// (newline included: a caller that shows several lines splits them first), DEL, the C1 controls whether raw
// (0x80-0x9f) or UTF-8 encoded (U+0080-U+009F, each of their two bytes escaped), and any byte that is not part of
// valid UTF-8. Printable ASCII, tab and valid UTF-8 text are kept as they are; a backslash is kept too, so a path
// or a Windows-style message reads unchanged (which makes the result ambiguous with a literal "\x1b", harmlessly).
// Applying it twice gives the same text as once.
std::string terminal_safe(std::string_view text);

// The same for text of several lines: each line escaped as above, the newlines between them kept.
std::string terminal_safe_lines(std::string_view text);

}  // namespace dtrain

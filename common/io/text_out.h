#pragma once

// Text on its way out of dtrain: quoted for a POSIX shell, or written whole to a stream's descriptor.

#include <cstdio>
#include <string>
#include <string_view>

namespace dtrain {

// `text` in single quotes for a POSIX shell (a ' inside becomes '\''), whatever it holds.
std::string shell_quote(std::string_view text);

// Writes `text` to `to`'s descriptor in as few write(2) calls as the kernel allows, after flushing `to` (so the order
// stays the order of calls). A closed terminal or a full disk ends the write quietly.
void write_whole(std::FILE* to, std::string_view text);

}  // namespace dtrain

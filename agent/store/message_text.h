#pragma once
// How the store names keys, values, timeouts and limits in its messages. Private to agent/store/.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace dtrain::store {

// A key or value as it may appear in a message: quoted, printable, and short.
std::string quoted(std::string_view text, std::size_t limit = 80);
// "300000 ms".
std::string ms_text(std::chrono::milliseconds ms);
// "64 MiB", "16 KiB" or "1000 bytes": limits in messages, in the unit people think in.
std::string bytes_text(std::size_t bytes);

}  // namespace dtrain::store

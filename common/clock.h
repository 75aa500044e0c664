#pragma once

// Wall-clock times as dtrain writes them: Unix milliseconds in messages and events, a local timestamp in names.

#include <cstdint>
#include <string>

namespace dtrain {

// Milliseconds since the Unix epoch (wall clock), as carried in session messages.
std::uint64_t unix_ms();

// Local time as YYYYmmdd-HHMMSS, the timestamp in job ids and log directories.
std::string timestamp_now();

}  // namespace dtrain

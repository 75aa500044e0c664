#pragma once

// Sizes as `dtrain plan` reads and prints them: GB = 1e9 bytes (as GPU vendors and the ZeRO paper count), GiB =
// 2^30 bytes only where written.

#include <string>
#include <string_view>

#include "common/status.h"

namespace dtrain::plan {

// "80GB", "80 GB", "80GiB", "141e9B", "96MB", "1.5TB", or a bare number of GB ("80"). Fails with a message that
// names the text and what is accepted; the value must be positive and finite.
Result<double> parse_bytes(std::string_view text);

// "31.4 GB" (one decimal; below 0.1 GB: "12.3 MB").
std::string format_gb(double bytes);
// "1.23 s", "45.6 ms" or "789 us".
std::string format_seconds(double seconds);

}  // namespace dtrain::plan

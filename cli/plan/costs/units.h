#pragma once

// Sizes as `dtrain plan` reads and prints them: GB = 1e9 bytes (as GPU vendors and the ZeRO paper count), GiB =
// 2^30 bytes only where written.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dtrain::plan {

// The number that starts `text` when it is written in decimal ("7.5e9", "80", "0.5", ".5", "1E3"), and in `used`
// how many characters it took; nullopt for anything else a C library would read as a number (hex "0x10", "inf",
// "nan", a leading space or sign), and for a value past a double's range.
std::optional<double> parse_decimal(std::string_view text, std::size_t& used);

// The sizes of GPU memory `dtrain plan` accepts: 1 MB to 1 PB. A thousand times today's largest GPU is still in
// range, and every byte count the plan prints stays exact in a 64-bit integer.
inline constexpr double kMinGpuMemoryBytes = 1e6;
inline constexpr double kMaxGpuMemoryBytes = 1e15;

// "80GB", "80 GB", "80GiB", "141e9B", "96MB", "1.5TB", or a bare number of GB ("80"). Fails with a message that
// names the text and what is accepted; the value must be decimal and from kMinGpuMemoryBytes to kMaxGpuMemoryBytes.
Result<double> parse_bytes(std::string_view text);

// "31.4 GB" (one decimal; below 0.1 GB: "12.3 MB").
std::string format_gb(double bytes);
// "1.23 s", "45.6 ms" or "789 us".
std::string format_seconds(double seconds);

}  // namespace dtrain::plan

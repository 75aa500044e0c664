#pragma once

// The values of torchrun's options as `dtrain run` reads them (torchrun_options.cpp): whole numbers and seconds in
// range, lists, HOST[:PORT] endpoints, both spellings of an option, --redirects / --tee streams.

#include <optional>
#include <string>
#include <vector>

namespace dtrain::cli::run {

// A whole decimal number in [lo, hi], or nothing.
std::optional<long> parse_int(const std::string& s, long lo, long hi);

// A number of seconds from 0 to 7 days, or nothing.
std::optional<double> parse_seconds(const std::string& s);

// `s` cut at every `sep` (empty pieces kept).
std::vector<std::string> split(const std::string& s, char sep);

// HOST[:PORT] or [V6]:PORT; port 0 when absent. Returns "" or what is wrong.
std::string split_endpoint(const std::string& endpoint, std::string& host, int& port);

// Both spellings of a long option: "--nproc-per-node,--nproc_per_node".
std::string spellings(const std::string& dashed);

// Which streams a --redirects / --tee value names (0-3); a per-rank map is refused. Returns "" or the refusal.
std::string parse_streams(const std::string& option, const std::string& value, int& streams);

}  // namespace dtrain::cli::run

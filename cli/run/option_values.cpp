#include "cli/run/option_values.h"

#include <cerrno>
#include <cstdlib>

namespace dtrain::cli::run {

// A whole decimal number in [lo, hi], or nothing.
std::optional<long> parse_int(const std::string& s, long lo, long hi) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  long v = std::stol(s);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<double> parse_seconds(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !(v >= 0) || v > 7 * 24 * 3600.0) return std::nullopt;
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// HOST[:PORT] or [V6]:PORT; port 0 when absent. Returns "" or what is wrong.
std::string split_endpoint(const std::string& endpoint, std::string& host, int& port) {
  std::string rest;
  if (!endpoint.empty() && endpoint.front() == '[') {
    auto close = endpoint.find(']');
    if (close == std::string::npos) return "an IPv6 address opened with '[' is not closed";
    host = endpoint.substr(1, close - 1);
    rest = endpoint.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return "expected ':PORT' after ']'";
    if (!rest.empty()) rest = rest.substr(1);
  } else {
    auto colon = endpoint.rfind(':');
    if (colon != std::string::npos && endpoint.find(':') != colon) {
      host = endpoint;  // a bare IPv6 address
    } else if (colon != std::string::npos) {
      host = endpoint.substr(0, colon);
      rest = endpoint.substr(colon + 1);
      if (rest.empty()) return "':' with no port after it";
    } else {
      host = endpoint;
    }
  }
  if (host.empty()) return "no host";
  port = 0;
  if (!rest.empty()) {
    auto p = parse_int(rest, 1, 65535);
    if (!p) return "port '" + rest + "' is not a number from 1 to 65535";
    port = static_cast<int>(*p);
  }
  return "";
}

// Both spellings of a long option: "--nproc-per-node,--nproc_per_node".
std::string spellings(const std::string& dashed) {
  std::string under = dashed;
  for (size_t i = 2; i < under.size(); ++i) {
    if (under[i] == '-') under[i] = '_';
  }
  return under == dashed ? dashed : dashed + "," + under;
}

// Which streams a --redirects / --tee value names (0-3); a per-rank map is refused.
std::string parse_streams(const std::string& option, const std::string& value, int& streams) {
  if (value.empty()) return "";
  if (auto v = parse_int(value, 0, 3)) {
    streams = static_cast<int>(*v);
    return "";
  }
  if (value.find(':') != std::string::npos) {
    return "dtrain run: " + option + " '" + value +
           "': a per-rank map is not supported; give one value, 0 (none), 1 (stdout), 2 (stderr) or 3 (both), for "
           "every rank";
  }
  return "dtrain run: " + option + " must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both) (got '" + value + "')";
}

}  // namespace dtrain::cli::run

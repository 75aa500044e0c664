#include "cli/spec/host_syntax.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "cli/spec/spec.h"

namespace dtrain::spec {
namespace detail {
namespace {

Status invalid(std::string problem) { return Status(StatusCode::invalid_argument, std::move(problem)); }

bool valid_host(std::string_view host) {
  return !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

// 1 to 5 decimal digits (std::stoi cannot overflow on it; the range is the caller's check).
bool port_digits(std::string_view port) {
  return !port.empty() && port.size() <= 5 && std::all_of(port.begin(), port.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

}  // namespace

Status check_address(std::string_view address, bool port_zero_ok) {
  std::string_view host, port;
  if (address.starts_with('[')) {
    const auto close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return invalid("is not [ipv6]:port");
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
    if (host.empty()) return invalid("has an empty host");
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos) return invalid("has no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return invalid("is ambiguous: write an IPv6 host in brackets");
    if (!valid_host(host)) return invalid("does not start with a host name or address");
  }
  if (!port_digits(port)) return invalid("does not end in a port number");
  const int value = std::stoi(std::string(port));
  if ((value < 1 && !(port_zero_ok && value == 0)) || value > 65535) return invalid("has a port outside 1-65535");
  return {};
}

Status check_ssh_host(std::string_view text) {
  if (text.empty()) return invalid("is empty");
  const auto at = text.find('@');
  if (at != std::string_view::npos) {
    const std::string_view user = text.substr(0, at);
    if (!valid_host(user)) return invalid("has an invalid user name before '@'");
    text = text.substr(at + 1);
  }
  const auto colon = text.find(':');
  if (!valid_host(text.substr(0, colon))) return invalid("is not a host name or IPv4 address");
  if (colon != std::string_view::npos) {
    const std::string_view port = text.substr(colon + 1);
    if (!port_digits(port)) return invalid("does not end in an ssh port number after ':'");
    const int value = std::stoi(std::string(port));
    if (value < 1 || value > 65535) return invalid("has an ssh port outside 1-65535");
  }
  return {};
}

}  // namespace detail

std::optional<SshHost> parse_ssh_host(std::string_view text) {
  if (!detail::check_ssh_host(text).ok()) return std::nullopt;
  SshHost out;
  if (const auto at = text.find('@'); at != std::string_view::npos) {
    out.user = std::string(text.substr(0, at));
    text = text.substr(at + 1);
  }
  const auto colon = text.find(':');
  out.host = std::string(text.substr(0, colon));
  if (colon != std::string_view::npos) out.port = std::stoi(std::string(text.substr(colon + 1)));
  return out;
}

}  // namespace dtrain::spec

#pragma once

// host:port addresses as the launcher and the agents name each other.

#include <string>

namespace dtrain {

// "host" of "host:port" (the whole text when there is no port).
std::string host_of(const std::string& address);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

}  // namespace dtrain

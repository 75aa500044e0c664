#pragma once

// Small helpers shared by the launcher and the agent.

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>

namespace dtrain {

// Milliseconds since the Unix epoch (wall clock), as carried in session messages.
std::uint64_t unix_ms();

// "host" of "host:port" (the whole text when there is no port).
std::string host_of(const std::string& address);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// "SIGKILL" for 9; nullptr for a signal without a conventional name here.
const char* signal_name(int signal);

// Local time as YYYYmmdd-HHMMSS, the timestamp in job ids and log directories.
std::string timestamp_now();

// `text` in single quotes for a POSIX shell (a ' inside becomes '\''), whatever it holds.
std::string shell_quote(std::string_view text);

// Writes `text` to `to`'s descriptor in as few write(2) calls as the kernel allows, after flushing `to` (so the order
// stays the order of calls). A closed terminal or a full disk ends the write quietly.
void write_whole(std::FILE* to, std::string_view text);

}  // namespace dtrain

namespace dtrain {

// gRPC keepalive on every session channel. Liveness is decided by the session heartbeats and
// health.node_timeout_s; keepalive only finds dead TCP connections while no message is due, so its timeout is
// generous: a peer starved of CPU (hundreds of agents on a few cores) must not be declared dead by it.
inline constexpr int kKeepaliveTimeMs = 10000;
inline constexpr int kKeepaliveTimeoutMs = 30000;

// strerror(errno) as a string: the text of the error the last failed call left.
std::string errno_text();

// Throws std::system_error for errno, with `what` saying which call failed.
[[noreturn]] void throw_errno(const char* what);

// Closes each descriptor that is open (>= 0); errors are ignored (the descriptors are being given up).
void close_fds(std::initializer_list<int> fds);

}  // namespace dtrain

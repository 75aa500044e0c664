// The small helpers of common/ (address.h, clock.h, syscalls.h, text_out.h), each against what it promises.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <regex>
#include <stdexcept>
#include <string>
#include <system_error>

#include <doctest/doctest.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/os/syscalls.h"
#include "common/io/text_out.h"

TEST_CASE("addresses: the host of host:port, and which hosts are loopback") {
  CHECK(dtrain::host_of("node7:29400") == "node7");
  CHECK(dtrain::host_of("node7") == "node7");
  CHECK(dtrain::host_of("[::1]:80") == "[::1]");
  for (const char* host : {"localhost", "127.0.0.1", "127.3.4.5", "::1", "[::1]"}) CHECK(dtrain::is_loopback_host(host));
  for (const char* host : {"10.0.0.1", "node7", "1270.0.0.1", "::2"}) CHECK(!dtrain::is_loopback_host(host));
}

TEST_CASE("clock: Unix milliseconds now, and a local YYYYmmdd-HHMMSS") {
  const auto ms = dtrain::unix_ms();
  CHECK(ms > 1'700'000'000'000ULL);  // after 2023
  CHECK(std::regex_match(dtrain::timestamp_now(), std::regex(R"(\d{8}-\d{6})")));
}

TEST_CASE("syscalls: errno in words, as an exception, signal names, closing descriptors") {
  errno = ENOENT;
  CHECK(dtrain::errno_text() == "No such file or directory");
  errno = EACCES;
  CHECK_THROWS_AS(dtrain::throw_errno("open x"), std::system_error);
  CHECK(std::string(dtrain::signal_name(SIGKILL)) == "SIGKILL");
  CHECK(std::string(dtrain::signal_name(SIGTERM)) == "SIGTERM");
  CHECK(dtrain::signal_name(SIGRTMIN + 3) == nullptr);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  dtrain::close_fds({fds[0], -1, fds[1]});
  CHECK(::fcntl(fds[0], F_GETFD) == -1);
  CHECK(::fcntl(fds[1], F_GETFD) == -1);
}

TEST_CASE("text out: shell quoting survives any text, and write_whole keeps the order of calls") {
  CHECK(dtrain::shell_quote("a b") == "'a b'");
  CHECK(dtrain::shell_quote("it's") == "'it'\\''s'");
  CHECK(dtrain::shell_quote("") == "''");
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  std::fputs("buffered ", file);  // still in stdio's buffer: write_whole flushes it first
  dtrain::write_whole(file, "then whole");
  std::rewind(file);
  char text[64] = {};
  CHECK(std::fread(text, 1, sizeof text - 1, file) == 19);
  CHECK(std::string(text) == "buffered then whole");
  std::fclose(file);
}

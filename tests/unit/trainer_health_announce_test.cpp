// dtrain-trainer's stack-dump announcement (trainer/health/stack_dump.h) on a real datagram socket standing in for
// the agent's health socket: nothing before the handler is installed, one datagram when it is, and the same datagram
// again from reannounce_stack_dump() (the health reporter repeats it with its first reports, since the agent drops an
// announcement that arrives before it has recorded the worker's pid).
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trainer/health/stack_dump.h"

namespace trainer_health_announce_test {

// The next datagram on fd, or "" when none is waiting.
std::string next_datagram(int fd) {
  char buffer[512];
  const ssize_t got = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  return got > 0 ? std::string(buffer, static_cast<std::size_t>(got)) : std::string();
}

TEST_CASE("the stack-dump handler is announced once installed, and again on request") {
  char dir[] = "/tmp/dtrain-announce-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string socket_path = std::string(dir) + "/socket", stacks = std::string(dir) + "/stacks.txt";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, socket_path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  ::setenv("DTRAIN_HEALTH_SOCKET", socket_path.c_str(), 1);
  ::setenv("DTRAIN_STACKS_FILE", stacks.c_str(), 1);
  ::setenv("RANK", "3", 1);
  ::setenv("DTRAIN_JOB_TOKEN", "ab12", 1);
  ::setenv("DTRAIN_REPORT_TOKEN", "cd34", 1);

  dtrain::trainer::reannounce_stack_dump();
  CHECK(next_datagram(fd).empty());  // nothing installed yet
  CHECK(dtrain::trainer::install_stack_dump() == SIGUSR2);
  const std::string first = next_datagram(fd);
  CHECK(first == "{\"rank\": 3, \"token\": \"ab12\", \"report_token\": \"cd34\", \"dump_signal\": " +
                     std::to_string(SIGUSR2) + "}");
  dtrain::trainer::reannounce_stack_dump();
  CHECK(next_datagram(fd) == first);
  CHECK(next_datagram(fd).empty());

  std::signal(SIGUSR2, SIG_DFL);
  for (const char* name : {"DTRAIN_HEALTH_SOCKET", "DTRAIN_STACKS_FILE", "RANK", "DTRAIN_JOB_TOKEN",
                           "DTRAIN_REPORT_TOKEN"})
    ::unsetenv(name);
  ::close(fd);
  ::unlink(socket_path.c_str());
  ::unlink(stacks.c_str());
  ::rmdir(dir);
}

}  // namespace trainer_health_announce_test

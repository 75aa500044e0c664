#include "trainer/health/stack_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trainer/comm/trace.h"
#include "trainer/health/phase.h"

namespace dtrain::trainer {
namespace {

int dump_fd = -1;

void on_dump_signal(int) {
  const int saved_errno = errno;
  SignalSafeLine line;
  line.text("dtrain-trainer pid ").number(static_cast<std::uint64_t>(::getpid())).text(": phase \"")
      .text(current_phase()).text("\"");
  line.write_to(dump_fd);
  write_all_traces(dump_fd);
  errno = saved_errno;
}

// {"rank": R, "token": ..., "report_token": ..., "dump_signal": S} to the agent's health socket. The tokens are hex
// (agent/security), so they need no JSON escaping; a missing variable or socket just means no announcement.
int installed_signal = 0;  // set by install_stack_dump()

void announce(int signal) {
  const char* socket_path = std::getenv("DTRAIN_HEALTH_SOCKET");
  const char* rank = std::getenv("RANK");
  const char* token = std::getenv("DTRAIN_JOB_TOKEN");
  const char* report_token = std::getenv("DTRAIN_REPORT_TOKEN");
  if (socket_path == nullptr || rank == nullptr || token == nullptr || report_token == nullptr) return;
  sockaddr_un address{};
  if (std::strlen(socket_path) >= sizeof(address.sun_path)) return;
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, socket_path);
  const std::string datagram = std::string("{\"rank\": ") + rank + ", \"token\": \"" + token +
                               "\", \"report_token\": \"" + report_token + "\", \"dump_signal\": " +
                               std::to_string(signal) + "}";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  ::sendto(fd, datagram.data(), datagram.size(), MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&address),
           sizeof(address));
  ::close(fd);
}

}  // namespace

int install_stack_dump() {
  const char* path = std::getenv("DTRAIN_STACKS_FILE");
  if (path == nullptr || *path == '\0') return 0;
  struct sigaction old {};
  if (sigaction(SIGUSR2, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return 0;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  dump_fd = fd;
  struct sigaction action {};
  action.sa_handler = on_dump_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR2, &action, nullptr) != 0) {
    ::close(fd);
    dump_fd = -1;
    return 0;
  }
  announce(SIGUSR2);
  installed_signal = SIGUSR2;
  return SIGUSR2;
}

void reannounce_stack_dump() {
  if (installed_signal != 0) announce(installed_signal);
}

}  // namespace dtrain::trainer

#pragma once

// The private channel between a launcher and the local agents it starts (provider local). Like slurmstepd's
// socket and ssh-agent's: a Unix socket in a directory that only its user can enter (mode 0700), and on every
// connection the peer's credentials as the kernel saw them at connect() (SO_PEERCRED) must be the launcher's: this
// agent's uid, and a pid among this agent's ancestors (the launcher, whose supervisor may put a keeper process in
// between). A connection that passes is handed to a gRPC server that serves sessions and nothing else; one that
// does not is closed before a byte is read. No other user reaches the socket (the directory stops them), and no
// other process of this user is taken for the launcher: not the workers (descendants), not anything unrelated.
// Ancestors may pass because they hold the agent already (they may signal it, and ptrace it even under Yama's
// ptrace_scope 1, which keeps ptrace to descendants).

#include <sys/types.h>

#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace grpc {
class Server;
}

namespace dtrain::agent {

class SessionSocket {
 public:
  // Binds a Unix socket at `path` and accepts connections into `server` until destroyed. The directory of `path`
  // must exist, belong to this user and be closed to group and others. Throws std::runtime_error that says what
  // is wrong.
  SessionSocket(std::string path, grpc::Server& server);
  // Stops accepting and removes the socket file. Connections already handed to the server stay its own.
  ~SessionSocket();

  SessionSocket(const SessionSocket&) = delete;
  SessionSocket& operator=(const SessionSocket&) = delete;

 private:
  void accept_loop();

  std::string path_;
  grpc::Server& server_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;   // eventfd: the destructor wakes the accept loop through it
  std::thread thread_;
};

// Whether the process at the other end of connected Unix socket `fd` may open a session here (permission_denied
// says why not): its uid must be `uid` and its pid one of `pids` (this agent's ancestors).
Status check_session_peer(int fd, uid_t uid, const std::vector<pid_t>& pids);

// The pids of this process's parent, its parent's parent, ... up to (not including) pid 1, from /proc.
std::vector<pid_t> ancestor_pids();

}  // namespace dtrain::agent
